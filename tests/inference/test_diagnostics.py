"""The checks of an MCMC run as sentences (`diagnostics.check_warnings`: what `qvr run` and
`qvr show` print under the summary), with the thresholds the dashboard's check panel uses."""
def test_check_warnings_name_each_failed_check_with_its_remedy():
    from qvr.inference.criticism.diagnostics import check_warnings
    good = {"num_chains": 4, "num_samples": 500, "total_divergences": 0, "max_r_hat": 1.004,
            "min_ess_bulk": 812.0, "min_ess_tail": 640.0, "max_depth_hits": 0,
            "max_tree_depth": 10, "e_bfmi": [0.9, 1.1, 1.0, 0.95]}
    assert check_warnings(good, "nuts") == []
    assert check_warnings(dict(good, num_samples=0, max_r_hat=3.0), "nuts") == []  # no draws
    # HMC on the identity metric: R-hat and ESS, the remedy said once
    stuck = dict(good, max_r_hat=2.558, min_ess_bulk=4.79, min_ess_tail=10.9)
    assert check_warnings(stuck, "hmc") == [
        "max R-hat 2.558 > 1.01: the chains disagree, they have not converged to one "
        "posterior; HMC keeps the identity metric unless told: try --mass-matrix diagonal, "
        "or --method nuts",
        "min ESS bulk 5 and tail 11 < 400 (100 per chain): too few effective draws for "
        "reliable means and quantiles; the same remedy"]
    assert "longer --warmup" in check_warnings(stuck, "hmc", "diagonal")[0]
    # NUTS: divergences, tree depth, E-BFMI; a low tail ESS alone asks for more draws
    bad = dict(good, total_divergences=1, max_depth_hits=12, e_bfmi=[0.9, 0.21, float("nan")],
               min_ess_tail=250.0)
    said = check_warnings(bad, "nuts")
    assert said[0].startswith("1 divergent draw after warmup: ")
    assert said[1] == ("min ESS tail 250 < 400 (100 per chain): too few effective draws "
                       "for reliable means and quantiles; more --samples")
    assert said[2] == ("12 draws at the maximum tree depth 10: trajectories were cut short; "
                       "try --max-tree-depth 12, or reparameterise")
    assert said[3].startswith("E-BFMI 0.21 < 0.3 in a chain")
    assert len(said) == 4
    assert not any("tree depth" in w for w in check_warnings(bad, "hmc"))

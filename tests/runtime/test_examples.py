"""Every `# runnable: yes` example compiles, samples, and scores data it sampled itself."""
import pytest
import torch

from runtime_support import EXAMPLES, load_example
from runtime_cases import FINITE, PIPELINES, PROGRAMS
from test_e9_examples import E9_EXAMPLES


def runnable():
    return sorted(p.stem for p in EXAMPLES.glob("*.qvr")
                  if p.read_text().splitlines()[0].strip() == "# runnable: yes")


def test_every_export_of_every_runnable_example_has_a_case():
    for stem in runnable():
        prog = load_example(stem)
        for key in prog.exports:
            assert (stem, key) in PROGRAMS or (stem, key) in PIPELINES or (stem, key) in FINITE \
                or (stem, key) in E9_EXAMPLES or key in prog.templates, (stem, key)


def test_the_non_runnable_example_still_loads():
    prog = load_example("ccg_semantics")
    assert prog.morphism is None and set(prog.deductions) == {"Meaning", "Reach"}


def _sampled_values(p, x, given):
    ex = p.execute(x, given, score=False)
    return {n: r.value for n, r in ex.sites.items() if r.step in ("sample", "observe")}


@pytest.mark.parametrize("stem, export", sorted(PROGRAMS))
def test_program_samples_and_scores_its_own_draws(stem, export):
    p = load_example(stem).exports[export]
    gen = torch.Generator().manual_seed(1)
    x, host, supplied = PROGRAMS[(stem, export)](gen)
    given = {**host, **supplied}
    out = p.rsample(x, observations=given)
    assert isinstance(out, torch.Tensor)
    values = _sampled_values(p, x, given)
    lj = p.log_joint(x, {**given, **values})
    assert lj.shape == (x.shape[0],)
    assert torch.isfinite(lj).all(), lj
    # the attribution-free total (MCMC's and the ELBO's form) is the sum of the rows
    total = p.log_joint_total(x, {**given, **values})
    assert total.shape == ()
    assert torch.allclose(total, lj.sum(), rtol=1e-5, atol=1e-3), (float(total), float(lj.sum()))


@pytest.mark.parametrize("stem, export", sorted(PIPELINES))
def test_pipeline_samples_and_scores_its_own_draws(stem, export):
    m = load_example(stem).exports[export]
    gen = torch.Generator().manual_seed(2)
    x, _, _ = PIPELINES[(stem, export)](gen)
    y = m.rsample(x)
    lp = m.log_prob(x, y)
    assert lp.shape == (x.shape[0],) and torch.isfinite(lp).all()


@pytest.mark.parametrize("stem, export", sorted(FINITE))
def test_finite_export_tensor(stem, export):
    m = load_example(stem).exports[export]
    t = m.tensor
    assert tuple(t.shape) == FINITE[(stem, export)]
    if m.algebra.name == "log_prob":
        # latent tensors are sigmoid(raw) in every algebra (spec 3.5), so log-weights here
        # are not normalised; they are finite
        assert torch.isfinite(t).all()
    else:
        assert ((t >= 0) & (t <= 1 + 1e-6)).all()


def test_crop_yields_template_call_is_inlined():
    prog = load_example("crop_yields").morphism
    names = [s.name for s in prog.site_infos()]
    assert names == ["base", "spread_scale", "site_mult__shift", "site_mult__effect", "noise",
                     "harvest"]
    gen = torch.Generator().manual_seed(0)
    x, host, _ = PROGRAMS[("crop_yields", "yields")](gen)
    ex = prog.execute(x, host, score=False)
    assert torch.equal(ex.sites["site_mult"].value, ex.sites["site_mult__effect"].value)
    assert [(s.name, s.site_kind) for s in prog.site_infos()][2:4] == [
        ("site_mult__shift", "global"), ("site_mult__effect", "plate")]

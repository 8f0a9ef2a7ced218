"""The files of a run record (format 1) and the names used in them.

A run record is one folder, ``runs/NAME-TIMESTAMP/``:

* ``run.json`` — written once at the start: ``format``, ``run_id``, ``program`` (``path``,
  ``sha256`` of the exact source text run, ``export``), ``method``, ``config`` (every
  `FitConfig` option), ``seed``, ``data`` (where the data came from), ``start_from``
  (the run a fit started from, with its source hash and, for SVI/HMC/NUTS, ``at``:
  ``means`` or ``draws``, the `FitConfig.start_at` used; or null), ``versions`` (qvr, torch,
  numpy, python), ``started`` (ISO 8601, UTC), ``host`` and ``pid`` of the writer;
* ``events.jsonl`` — every fit event as one JSON line (`qvr.events.to_json`),
  flushed as it is written; a `DrawsChunk` line refers to its chunk file;
* ``draws/c{chain}-{start:08d}.npz`` — one file per `DrawsChunk` (arrays by site, shape
  ``(count, *site_shape)``, a scalar site ``(count,)``; a recorded quantity of a
  ``record v = e`` step as ``recorded.v``, computed from the same draws; `Run.draws`
  gives them in the shapes of ``samples.npz``), complete before the line that refers to
  it is written;
* ``writer.lock`` — held (``flock``, exclusive) by the live writer: a record without a
  terminal event whose lock is free was left by a writer that died (readers probe it with
  a shared lock, so two readers never mistake each other for the writer);
* final results, each written atomically (temp file + rename): ``summary.json``
  (``status``, ``message``, ``method``, ``stats``; ``sites``: one row per latent site
  folded from all its coordinates, ``{"shape", "size", "n", "mean_lo", "mean_hi", "sd",
  "q5", "q50", "q95", "mcse_mean", "ess_bulk", "ess_tail", "r_hat"}`` as far as the method
  computes them, and ``"recorded": true`` for a recorded quantity (``record v = e``, under
  its own name ``v``); ``recorded``: the recorded quantities' names, in program order;
  ``parameters``: every coordinate's row ``{"site[i,j]": {column: value}}``;
  ``truncated``: coordinates left out, 0 since every coordinate is kept), ``summary.txt``
  (the table of every coordinate, for a person), ``samples.npz`` (MCMC draws and sampler
  statistics, and the recorded quantities of ``record v = e`` steps as
  ``recorded.v``; a scalar site is ``(chains, draws, 1)``), ``params.npz`` (fitted
  parameters), ``losses.npy`` (SVI), ``sequences.json`` (SMC), ``synthetic_truth.npz``
  (drawn ground truth), ``error.txt``;
* for a fitted program with attention layers (`qvr.inference.methods.circuits`):
  ``circuits.npz`` — per attention layer L (its morphism label, ``label#i`` for the i-th
  copy a ``stack`` made), in program order: ``qk/L`` (H, dA, dA), the QK circuits
  W_Q[h]^T W_K[h], and ``ov/L`` (H, dB, dA), the OV circuits W_O[:, head h] W_V[h];
  ``patterns.npz`` — ``inputs``: the first S <= 8 input sequences of the data, (S, T)
  int64 tokens or (S, T, d) floats, and ``pattern/L`` (S, H, T, T): the attention weights
  (query x key) of layer L on them, averaged over ``draws`` forward draws (the layer's
  input is random when an earlier link draws); ``draws`` and ``tokens`` (1 when the
  inputs are token ids) are scalars in the file.

After the fit (issue 25, `qvr.inference.criticism.pointwise` writes them; `qvr.inference.criticism.checks`
reads them; a fit of HMC/NUTS/SVI that finished, and every ``--method prior`` run):

* ``run.json`` gains ``data_sha256`` (sha256 over the observed values the fit conditioned
  on — by site name, keys sorted, dtype and shape included —, not the covariates: two
  models of the same observations have the same hash, also when they read different host
  data, as the Poisson and negative-binomial exports of ``count_regression`` do) and ``pointwise``: ``{"kind": "posterior" | "guide" | "prior",
  "chains": C, "draws": N (per chain), "log_lik": {site: shape}, "y_rep": {site: shape},
  "rows": {site: "local" | "plate" | "global" | "enumerated" | "marginalized"},
  "importance": true when the chunks hold ``log_p``/``log_q`` (SVI: PSIS from the guide)}``
  (the run.json is rewritten atomically when the pointwise phase starts);
* ``observed.npz`` — the observed values by site name (float64 or int64, as given), and
  ``group.NAME`` for every integer host-data array of one entry per data row (a grouping
  index such as ``hour_of``: per-group predictive checks);
* ``pointwise/c{chain}-{start:08d}.npz`` — chunks of draws of chain `chain` from draw
  `start`: ``log_lik.SITE`` (count, *shape) float32, the log-likelihood of each observed
  element at each draw (finite latents summed out exactly stay summed out: a program with
  enumerated finite latents has one term per data row, the site named by its observed
  sites joined with ``+``, shape ``(B,)``); ``y_rep.SITE`` (count, *shape) float32, one
  replicate of the observed values per draw (posterior or prior predictive); for SVI also
  ``log_p`` (count,) and ``log_q`` (count,): the log joint and the guide's log density at
  each draw (PSIS importance weights).  Each file is complete before it appears (temp file
  + rename), so a record killed mid-phase reads cleanly with the chunks it has;
* ``loo.json`` — PSIS-LOO (arviz-stats) over the rows of the pointwise terms;
  ``ppc.json`` — posterior (or prior) predictive checks and LOO-PIT (written by
  `qvr.inference.criticism.checks`, which documents their fields).

A prediction (``qvr predict RUN --data NEW``, `qvr.inference.front.predict`) is a record of
method ``predict``: ``run.json``'s ``predicted_from`` (``path``, ``run_id``, ``method``,
``sha256`` of the fitted run) and ``data`` (the new data); ``samples.npz`` holds every
observed site's draws at the new data and ``recorded.v`` per recorded quantity, ``(chains,
draws, *shape)``; ``summary.json`` their mean, sd and 5/50/95 % per element
(``parameters``), ``predicted`` (the observed sites) and ``recorded``; ``stats``:
``num_chains``, ``num_samples`` (per chain), ``rows``, ``stride``, ``elapsed``.
"""
FORMAT = 1
RUN_JSON = "run.json"
EVENTS = "events.jsonl"
DRAWS_DIR = "draws"
LOCK = "writer.lock"
SUMMARY = "summary.json"
SUMMARY_TEXT = "summary.txt"
SAMPLES = "samples.npz"
PARAMS = "params.npz"
LOSSES = "losses.npy"
SEQUENCES = "sequences.json"
TRUTH = "synthetic_truth.npz"
ERROR = "error.txt"
CIRCUITS = "circuits.npz"
PATTERNS = "patterns.npz"
OBSERVED = "observed.npz"
POINTWISE_DIR = "pointwise"
LOO = "loo.json"
PPC = "ppc.json"
LOG_LIK_PREFIX = "log_lik."
Y_REP_PREFIX = "y_rep."
GROUP_PREFIX = "group."
#: recorded quantities (`record v = e`, design E9.6) sit beside the sites' draws under
#: ``recorded.NAME`` in the draws chunks, ``samples.npz`` and a fit's flat draws dicts
#: (as sampler statistics sit under ``sample_stats.NAME``): the record says which arrays
#: are recorded quantities by itself, also when it ends early; `Run.draws` gives them
#: under their own names, `Run.recorded_names` lists them
RECORDED_PREFIX = "recorded."
STATUSES = ("running", "finished", "failed", "cancelled", "interrupted")


def draws_file(chain: int, start: int) -> str:
    """The chunk file of chain `chain`'s draws from index `start` (relative path)."""
    return f"{DRAWS_DIR}/c{int(chain)}-{int(start):08d}.npz"


def pointwise_file(chain: int, start: int) -> str:
    """The chunk file of chain `chain`'s pointwise terms from draw `start` (relative)."""
    return f"{POINTWISE_DIR}/c{int(chain)}-{int(start):08d}.npz"


def nothing_sampled(stats) -> bool:
    """Whether an HMC/NUTS summary's ``stats`` are those of a fit that ran no chain (every
    latent finite and summed out): it holds the ``log_marginal_likelihood`` instead, with
    ``num_chains`` 0 (`qvr.inference.methods.mcmc`)."""
    return stats.get("log_marginal_likelihood") is not None and not stats.get("num_chains")

"""Inputs and host data for running every `# runnable: yes` example (shared by tests).

`CASES[(file stem, export)]` gives a function `make(gen) -> (x, host, supplied)` where
`host` is the host data the program reads and `supplied` the values of observe sites that
forward sampling cannot draw (the bodies of marginalize blocks).  Sizes are kept small.
"""
import torch

N = 40  # rows of regression-style programs


def _ints(gen, n, high, shape=None):
    return torch.randint(0, high, shape or (n,), generator=gen)


def _rows(gen):
    return torch.zeros(N, 1), {}, {}


def count_rentals(gen):
    host = {"dock_of": _ints(gen, N, 25), "hour_of": _ints(gen, N, 24),
            "temperature": torch.randn(N, generator=gen)}
    return torch.zeros(N, 1), host, {}


def count_poisson(gen):
    return torch.zeros(N, 1), {"hour_of": _ints(gen, N, 24)}, {}


def crop_yields(gen):
    return torch.zeros(N, 1), {"site_of": _ints(gen, N, 12)}, {}


def grouped_segments(gen):
    host = {"buyer_of": _ints(gen, N, 300)}
    supplied = {"amount": torch.rand(N, generator=gen) * 5 + 0.1,
                "items": _ints(gen, N, 6).float()}
    return torch.zeros(N, 1), host, supplied


def item_response(gen):
    return torch.zeros(N, 1), {"pupil_of": _ints(gen, N, 120), "level_of": _ints(gen, N, 3)}, {}


def gaussian_mixture(gen):
    return torch.zeros(N, 1), {}, {"position": torch.randn(N, generator=gen) * 5}


def faulty_sensor(gen):
    return torch.zeros(N, 1), {}, {"temperature": 20 + torch.randn(N, generator=gen)}


def sentence_score(gen):
    return torch.zeros(1, 1), {"tokens": ["the", "dog", "s", "saw", "a", "cat"]}, {}


def spending(gen):
    return torch.zeros(N, 1), {"income": torch.randn(N, generator=gen),
                               "region_of": _ints(gen, N, 8)}, {}


def robust_spending(gen):
    return torch.zeros(N, 1), {"income": torch.randn(N, generator=gen)}, {}


def lda(gen):
    return torch.zeros(N, 1), {"doc_of": _ints(gen, N, 100)}, {"word": _ints(gen, N, 1000)}


def tokens(high, shape):
    return lambda gen: (_ints(gen, 0, high, shape), {}, {})


def floats(shape):
    return lambda gen: (torch.randn(*shape, generator=gen), {}, {})


def cvae(gen):
    x = torch.cat([torch.rand(3, 64, generator=gen), _ints(gen, 3, 10).float().unsqueeze(-1)], -1)
    return x, {}, {}


def humidity(gen):
    return torch.rand(5, 1, generator=gen), {}, {}


# (file stem, export) -> make
PROGRAMS = {
    ("count_regression", "rentals"): count_rentals,
    ("count_regression", "rentals_poisson"): count_poisson,
    ("crop_yields", "yields"): crop_yields,
    ("decoder_lm", "decoder_lm"): tokens(32, (3, 10)),
    ("expert_ensemble", "house_price"): floats((4, 12)),
    ("grouped_mixture", "segments"): grouped_segments,
    ("hmm", "regime_hmm"): tokens(4, (6,)),
    ("hmm", "local_level"): floats((3, 5, 2)),
    ("humidity_bands", "daily_weather"): humidity,
    ("icl_regression", "icl_regression"): floats((3, 41, 6)),
    ("item_response", "item_response"): item_response,
    ("knowledge_graph", "residence"): tokens(30, (7,)),
    ("mixture_marginalize", "gaussian_mixture"): gaussian_mixture,
    ("mixture_marginalize", "faulty_sensor"): faulty_sensor,
    ("pcfg_deduction", "sentence_score"): sentence_score,
    ("recurrent_lm", "char_rnn"): tokens(64, (3, 5)),
    ("regression_plates", "spending"): spending,
    ("regression_plates", "robust_spending"): robust_spending,
    ("relational_authors", "submission"): tokens(40, (6,)),
    ("sensor_tracking", "track"): floats((3, 4, 3)),
    ("topic_model", "lda"): lda,
    ("transformer_lm", "transformer_lm"): tokens(32, (3, 4)),
    ("vae", "vae"): floats((3, 64)),
    ("vae", "cvae"): cvae,
}

# non-program continuous exports: (file stem, export) -> make
PIPELINES = {
    ("expert_ensemble", "duo"): floats((4, 12)),
    ("humidity_bands", "forecast"): humidity,
    ("recurrent_lm", "encoder"): tokens(64, (3, 5)),
    ("sensor_tracking", "tracker"): floats((3, 4, 3)),
    ("vae", "autoencoder"): floats((3, 64)),
    ("vae", "conditional_autoencoder"): cvae,
}

# finite exports: (file stem, export) -> tensor shape
FINITE = {
    ("hmm", "emit_later"): (4, 10),
    ("hmm", "stationary"): (4, 4),
    ("knowledge_graph", "nationality"): (30, 5),
    ("knowledge_graph", "neighbours"): (30, 30),
    ("knowledge_graph", "pair_profile"): (30, 30, 5, 12),
    ("relational_authors", "author_venue"): (40, 9),
    ("relational_authors", "joint_profile"): (40, 9, 6, 6),
    ("relational_authors", "topic_walk"): (6, 6),
}

# module-level data for `from_data` initialisers
DATA = {"knowledge_graph": lambda: {
    "city_country": torch.log(torch.nn.functional.one_hot(torch.arange(12) % 5, 5).float()
                              .clamp(min=1e-3))}}

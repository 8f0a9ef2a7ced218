"""Generate the data files of the runnable examples that are not text corpora.

    python examples/data/make_data.py          # rewrites the files below (deterministic)

Each generator draws a small, plausible data set from a stated "true" process with its own
seed (numpy's `default_rng`), rounds the values as a measurement would be recorded, and
writes ``examples/data/NAME.json``: a JSON object whose keys are the observed site names
and host-data names of the example's first export, ``x`` for the program input, and
``from_data/KEY`` for the table of a ``from_data("KEY")`` observed morphism.  The text
corpora (``transformer_lm``, ``recurrent_lm``, ``pcfg_deduction``, ``topic_model``) come
from ``make_corpus.py``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from make_corpus import HERE, write_json


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def r(a, digits: int):
    """Rounded values as nested lists (what is written)."""
    return np.round(np.asarray(a, dtype=float), digits).tolist()


def count_regression() -> dict:
    """Hourly bike rentals at 8 of the 25 stations, 9 daytime hours each (72 records).

    `dock_of`: station id; `hour_of`: hour of day (6..22); `temperature`: departure from
    15 °C in °C; `rented`: bikes rented in that hour.  Truth: about 9 rentals an hour,
    commuting peaks at 8 and 17-18 h, +4 % per °C, negative-binomial over-dispersion 8."""
    g = rng(101)
    stations = np.arange(8)
    hours = np.array([6, 8, 10, 12, 14, 16, 17, 18, 22])
    station_effect = g.normal(0.0, 0.4, 25)
    hour_effect = np.zeros(24)
    hour_effect[[7, 8, 9]] = [0.4, 0.8, 0.3]
    hour_effect[[16, 17, 18, 19]] = [0.3, 0.7, 0.7, 0.2]
    hour_effect[[0, 1, 2, 3, 4, 5, 6, 21, 22, 23]] = -0.9
    dock_of, hour_of = (a.ravel() for a in np.meshgrid(stations, hours, indexing="ij"))
    temperature = np.round(g.normal(3.0, 4.0, dock_of.size), 1)
    rate = np.exp(2.2 + station_effect[dock_of] + hour_effect[hour_of] + 0.04 * temperature)
    dispersion = 8.0
    rented = g.negative_binomial(dispersion, dispersion / (dispersion + rate))
    return {"dock_of": dock_of.tolist(), "hour_of": hour_of.tolist(),
            "temperature": temperature.tolist(), "rented": rented.tolist()}


def crop_yields() -> dict:
    """Barley yields (t/ha) on 48 plots, four at each of the 12 experimental sites.

    `site_of`: site of each plot; `harvest`: yield in t/ha.  Truth: 3.4 t/ha plus the log of
    a site multiplier (log-normal, spread 0.3), Student-t(4) plot noise of 0.25 t/ha."""
    g = rng(102)
    site_of = np.repeat(np.arange(12), 4)
    site_mult = np.exp(g.normal(0.0, 0.3, 12))
    expected = 3.4 + np.log(site_mult[site_of])
    harvest = expected + 0.25 * g.standard_t(4.0, site_of.size)
    return {"site_of": site_of.tolist(), "harvest": r(harvest, 2)}


def item_response() -> dict:
    """Answers of 30 students to 8 questions (240 responses), questions of three levels.

    `pupil_of`: student id; `level_of`: difficulty level of the question (0 easy, 1 medium,
    2 hard); `correct`: 1 if answered correctly.  Truth: abilities N(0, 1), thresholds
    -0.8, 0.3, 1.4, discrimination 1.3."""
    g = rng(103)
    levels = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    pupil_of, q = (a.ravel() for a in np.meshgrid(np.arange(30), np.arange(8), indexing="ij"))
    level_of = levels[q]
    ability = g.normal(0.0, 1.0, 120)
    threshold = np.array([-0.8, 0.3, 1.4])
    p = 1.0 / (1.0 + np.exp(-1.3 * (ability[pupil_of] - threshold[level_of])))
    correct = (g.random(p.size) < p).astype(int)
    return {"pupil_of": pupil_of.tolist(), "level_of": level_of.tolist(),
            "correct": correct.tolist()}


def regression_plates() -> dict:
    """Monthly spending against net income of 64 households, 8 in each of 8 regions.

    `income`, `spend`: thousand euros a month; `region_of`: region id.  Truth: regional
    intercepts N(0.5, 0.2), 0.55 of each extra thousand spent, residual sd 0.25."""
    g = rng(104)
    region_of = np.repeat(np.arange(8), 8)
    income = np.round(g.lognormal(math.log(2.8), 0.35, region_of.size), 2)
    intercept = g.normal(0.5, 0.2, 8)
    spend = intercept[region_of] + 0.55 * income + g.normal(0.0, 0.25, income.size)
    return {"region_of": region_of.tolist(), "income": income.tolist(),
            "spend": r(spend, 2)}


CITIES = [("Paris", 0), ("Lyon", 0), ("Marseille", 0), ("Berlin", 1), ("Hamburg", 1),
          ("Munich", 1), ("Rome", 2), ("Milan", 2), ("Madrid", 3), ("Barcelona", 3),
          ("Valencia", 3), ("Lisbon", 4)]
COUNTRIES = ["France", "Germany", "Italy", "Spain", "Portugal"]


def knowledge_graph() -> dict:
    """Where 30 people live: the country on each person's record, plus the fixed
    city-to-country table.

    `from_data/city_country`: 12 x 5 log-probabilities (log_prob algebra) that a record
    for each city (Paris, Lyon, Marseille, Berlin, Hamburg, Munich, Rome, Milan, Madrid,
    Barcelona, Valencia, Lisbon) names each country (France, Germany, Italy, Spain,
    Portugal): 0.996 for the true country, 0.001 for each other one (clerical errors).
    `x`: person id (30 x 1); `country`: the country on the person's record (30 x 1).
    Truth: each person lives in a city drawn with the cities' population weights."""
    g = rng(105)
    table = np.full((12, 5), math.log(0.001))
    for city, (_, country) in enumerate(CITIES):
        table[city, country] = math.log(0.996)
    weights = np.array([11, 2, 2, 4, 2, 2, 4, 3, 6, 5, 2, 3], dtype=float)
    home = g.choice(12, size=30, p=weights / weights.sum())
    probs = np.exp(table[home])
    country = np.array([g.choice(5, p=row / row.sum()) for row in probs])
    return {"from_data/city_country": r(table, 4), "x": np.arange(30)[:, None].tolist(),
            "country": country[:, None].tolist()}


def grouped_mixture() -> dict:
    """132 purchases by 40 customers from four segments (bargain, regular, family, premium).

    `buyer_of`: customer id of each purchase; `amount`: basket value in euros; `items`:
    number of items.  Truth: segment shares 0.4/0.3/0.2/0.1, median baskets of 12, 27,
    55 and 100 euros (log-normal, sd 0.4), 2, 4, 8 and 5 items on average."""
    g = rng(106)
    segment = g.choice(4, size=40, p=[0.4, 0.3, 0.2, 0.1])
    visits = g.integers(2, 6, size=40)
    buyer_of = np.repeat(np.arange(40), visits)
    loc = np.log([12.0, 27.0, 55.0, 100.0])
    rate = np.array([2.0, 4.0, 8.0, 5.0])
    seg = segment[buyer_of]
    amount = np.exp(g.normal(loc[seg], 0.4))
    items = g.poisson(rate[seg])
    return {"buyer_of": buyer_of.tolist(), "amount": r(amount, 2), "items": items.tolist()}


def mixture_marginalize() -> dict:
    """Positions (m) of 60 nests along a 30 m transect, in three colonies.

    `position`: metres from the transect's midpoint.  Truth: colonies at -9, 1 and 8 m
    holding 40 %, 35 % and 25 % of the nests, spread 1.5 m."""
    g = rng(107)
    comp = g.choice(3, size=60, p=[0.4, 0.35, 0.25])
    position = np.array([-9.0, 1.0, 8.0])[comp] + g.normal(0.0, 1.5, 60)
    return {"position": r(position, 1)}


def hmm() -> dict:
    """80 pairs (hidden regime now, symbol five steps later) from a sticky 4-regime chain.

    `x`: the regime at the start (80 x 1, ids 0..3); `symbol`: the symbol emitted five
    steps later (80 x 1, ids 0..9).  Truth: stay with probability 0.85, otherwise move to
    a neighbouring regime; regime k emits mostly symbols 2k and 2k+1 (and 8, 9 rarely)."""
    g = rng(108)
    trans = np.full((4, 4), 0.0)
    for k in range(4):
        trans[k, k] = 0.85
        trans[k, (k + 1) % 4] = 0.1
        trans[k, (k - 1) % 4] = 0.05
    emit = np.full((4, 10), 0.02)
    for k in range(4):
        emit[k, 2 * k] += 0.5
        emit[k, 2 * k + 1] += 0.34
    emit /= emit.sum(axis=1, keepdims=True)
    start = g.choice(4, size=80)
    symbol = []
    for s in start:
        z = s
        for _ in range(5):
            z = g.choice(4, p=trans[z])
        symbol.append(int(g.choice(10, p=emit[z])))
    return {"x": start[:, None].tolist(), "symbol": np.array(symbol)[:, None].tolist()}


def humidity_bands() -> dict:
    """60 days of weather: mean relative humidity, sky condition and rainfall.

    `x`: relative humidity as a fraction (60 x 1); `sky`: 0 clear, 1 cloudy, 2 rain;
    `rain`: rainfall (mm) in the morning and in the afternoon (60 x 2; a trace of 0.1 mm
    is recorded as the least amount).  Truth: the more humid the day, the cloudier and the
    wetter (five equal humidity bands)."""
    g = rng(109)
    humidity = np.clip(g.beta(5.0, 3.0, 60), 0.05, 0.98)
    band = np.minimum((humidity * 5).astype(int), 4)
    sky_p = np.array([[0.8, 0.18, 0.02], [0.6, 0.3, 0.1], [0.35, 0.45, 0.2],
                      [0.15, 0.45, 0.4], [0.05, 0.3, 0.65]])
    sky = np.array([g.choice(3, p=sky_p[b]) for b in band])
    mean_mm = np.array([0.2, 0.4, 1.0, 2.5, 5.0])[band]
    rain = g.gamma(1.5, mean_mm[:, None] / 1.5, size=(60, 2))
    rain = np.maximum(np.round(rain, 1), 0.1)
    return {"x": r(humidity[:, None], 2), "sky": sky.tolist(), "rain": rain.tolist()}


def relational_authors() -> dict:
    """90 paper submissions: who submitted (40 authors) and to which of 9 venues.

    `x`: author id (90 x 1); `venue`: venue id (90 x 1).  Truth: each author works on one
    or two of 6 topics; each venue hosts one or two topics; a submission goes to a venue
    hosting one of the author's topics (5 % go anywhere)."""
    g = rng(110)
    interests = [g.choice(6, size=g.integers(1, 3), replace=False) for _ in range(40)]
    hosts = [[0], [0, 1], [1], [2], [2, 3], [3], [4], [4, 5], [5]]
    author = g.integers(0, 40, size=90)
    venue = []
    for a in author:
        topic = g.choice(interests[a])
        fits = [v for v, ts in enumerate(hosts) if topic in ts]
        venue.append(int(g.integers(0, 9) if g.random() < 0.05 else g.choice(fits)))
    return {"x": author[:, None].tolist(), "venue": np.array(venue)[:, None].tolist()}


def sensor_tracking() -> dict:
    """32 windows of 12 hourly readings from a weather station, and the reading after.

    `x`: (32, 12, 3) readings (temperature, relative humidity, pressure, each as a z-score
    of the station's long-run record); `next_obs`: (32, 3) the next hour's reading.  Truth:
    a daily temperature cycle, humidity moving against temperature, pressure a slow
    random walk, all with sensor noise 0.1."""
    g = rng(111)
    hours = 32 * 4 + 12 + 1
    t = np.arange(hours)
    temp = 1.2 * np.sin(2 * np.pi * (t - 9) / 24) + np.cumsum(g.normal(0, 0.05, hours))
    hum = -0.8 * temp + np.cumsum(g.normal(0, 0.05, hours))
    pres = np.cumsum(g.normal(0, 0.08, hours))
    series = np.stack([temp, hum, pres], axis=1) + g.normal(0, 0.1, (hours, 3))
    starts = np.arange(0, 32 * 4, 4)
    x = np.stack([series[s:s + 12] for s in starts])
    y = np.stack([series[s + 12] for s in starts])
    return {"x": r(x, 2), "next_obs": r(y, 2)}


FEATURES = ["floor area", "rooms", "bathrooms", "age", "plot size", "distance to centre",
            "garage", "garden", "floor level", "energy rating", "school rating",
            "street noise"]


def expert_ensemble() -> dict:
    """60 house sales: 12 standardized features and the log sale price.

    `x`: (60, 12) z-scores of floor area, rooms, bathrooms, age, plot size, distance to the
    centre, garage, garden, floor level, energy rating, school rating and street noise;
    `price`: (60, 1) log of the price in units of 100 000 euros.  Truth: log price 1.0 +
    a linear effect of the features (area, rooms, bathrooms and ratings up; age, distance
    and noise down) + a small area x school interaction, Student-t(5) noise 0.12."""
    g = rng(112)
    n = 60
    x = g.normal(0.0, 1.0, (n, 12))
    x[:, 1] = 0.7 * x[:, 0] + 0.7 * g.normal(0.0, 1.0, n)   # rooms follow the area
    x[:, 6] = (g.random(n) < 0.5) * 2.0 - 1.0              # garage: yes / no
    x[:, 7] = (g.random(n) < 0.6) * 2.0 - 1.0              # garden: yes / no
    beta = np.array([0.30, 0.08, 0.07, -0.10, 0.05, -0.18, 0.04, 0.03, 0.02, 0.06, 0.12,
                     -0.08])
    logp = 1.0 + x @ beta + 0.05 * x[:, 0] * x[:, 10] + 0.12 * g.standard_t(5.0, n)
    return {"x": r(x, 2), "price": r(logp[:, None], 3)}


def vae() -> dict:
    """48 greyscale 8 x 8 images of simple strokes (bars, crosses, boxes, diagonals).

    `x` and `pixels`: (48, 64) the same images, rows flattened, intensities in [0, 1]
    (the program encodes the image it scores).  Truth: one of six stroke shapes at a
    random offset, stroke intensity 0.7-1.0, background noise 0.05."""
    g = rng(113)
    images = []
    for i in range(48):
        img = np.zeros((8, 8))
        kind = i % 6
        a, b = g.integers(1, 7, size=2)
        if kind == 0:
            img[a, 1:7] = 1.0                      # horizontal bar
        elif kind == 1:
            img[1:7, b] = 1.0                      # vertical bar
        elif kind == 2:
            img[a, 1:7] = 1.0
            img[1:7, b] = 1.0                      # cross
        elif kind == 3:
            img[1, 1:7] = img[6, 1:7] = img[1:7, 1] = img[1:7, 6] = 1.0   # box
        elif kind == 4:
            np.fill_diagonal(img, 1.0)            # diagonal
        else:
            np.fill_diagonal(np.fliplr(img), 1.0)  # anti-diagonal
        img *= g.uniform(0.7, 1.0)
        img = np.clip(img + np.abs(g.normal(0.0, 0.05, (8, 8))), 0.0, 1.0)
        images.append(img.ravel())
    images = np.stack(images)
    return {"x": r(images, 2), "pixels": r(images, 2)}


GENERATORS = [count_regression, crop_yields, item_response, regression_plates,
              knowledge_graph, grouped_mixture, mixture_marginalize, hmm, humidity_bands,
              relational_authors, sensor_tracking, expert_ensemble, vae]


def main(out: Path = HERE) -> None:
    """Write every file into `out` (default: this folder)."""
    for gen in GENERATORS:
        write_json(out, f"{gen.__name__}.json", gen())


if __name__ == "__main__":
    main()

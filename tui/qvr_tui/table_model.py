"""What the MCMC summary table shows (`table_rows`): sites sorted by a `SORT_KEYS` key
and filtered by a substring, each expanded site followed by its coordinates.  Torch-free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from qvr_tui.results_data import Coord, SiteRow

__all__ = ["SORT_KEYS", "TableRow", "table_rows"]


def _worst_high(v: float) -> float:
    """Ascending sort key putting the largest values first, and NaN (no value: worst)
    before them."""
    return -math.inf if math.isnan(v) else -v


SORT_KEYS: dict[str, tuple[str, Callable]] = {
    # key: (label, function of a SiteRow or Coord giving an ascending sort key)
    "order": ("record order", lambda r: getattr(r, "order", 0)),
    "r_hat": ("worst R-hat first",
              lambda r: _worst_high(r.worst_r_hat if isinstance(r, SiteRow)
                                    else r.get("r_hat"))),
    "ess_bulk": ("lowest bulk ESS first",
                 lambda r: _nan_first(r.min_ess_bulk if isinstance(r, SiteRow)
                                      else r.get("ess_bulk"))),
    "ess_tail": ("lowest tail ESS first",
                 lambda r: _nan_first(r.min_ess_tail if isinstance(r, SiteRow)
                                      else r.get("ess_tail"))),
    "name": ("by name", lambda r: r.site if isinstance(r, SiteRow) else r.label),
}


def _nan_first(v: float) -> float:
    return -math.inf if math.isnan(v) else v


@dataclass(frozen=True)
class TableRow:
    key: str            # site name, or coordinate label
    site: str
    coord: Optional[Coord]   # None for a site row
    row: Optional[SiteRow]
    depth: int          # 0 site, 1 coordinate


def table_rows(sites: Sequence[SiteRow], sort: str = "order", query: str = "",
               expanded: frozenset | set = frozenset()) -> list[TableRow]:
    """The rows the summary table shows: sites sorted by `sort` (a `SORT_KEYS` key), each
    expanded site followed by its coordinates (sorted the same way; the sort within a site
    keeps index order for "order"/"name").  `query` keeps the sites whose name contains it
    (case-insensitive), or those with a coordinate label containing it — then only the
    matching coordinates are listed, as if expanded."""
    fn = SORT_KEYS.get(sort, SORT_KEYS["order"])[1]
    q = query.strip().lower()
    out = []
    for s in sorted(sites, key=lambda r: (fn(r), r.order)):
        if q and q not in s.site.lower():
            hits = [c for c in s.coords if q in c.label.lower()]
            if not hits:
                continue
            coords, show = hits, True
        else:
            coords, show = list(s.coords), s.site in expanded
        out.append(TableRow(s.site, s.site, None, s, 0))
        if show and s.shape:
            if sort not in ("order", "name"):
                coords = sorted(coords, key=lambda c: (fn(c), c.index))
            out.extend(TableRow(c.label, s.site, c, s, 1) for c in coords)
    return out

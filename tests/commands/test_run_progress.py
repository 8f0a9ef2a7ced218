"""The live display of `qvr run` (`qvr.commands.progress`, rich), rendered to text: one row
per chain with its phase, bar, step, rate, acceptance, step size, divergences and ETA;
nothing before the fit has said which method it runs."""
import io

from rich.console import Console

from qvr.commands.progress import Progress
from qvr.events import FitProgress, FitStarted


def text_of(progress: Progress) -> str:
    console = Console(record=True, width=110, file=io.StringIO())
    console.print(progress._render())
    return console.export_text()


def rows(text: str) -> dict:
    """`{first cell: cells}` of the rendered table without its bar characters."""
    out = {}
    for line in text.splitlines()[1:]:
        cells = [c for c in line.split() if not set(c) <= set("━╸╺ ")]
        out[cells[0]] = cells
    return out


def nuts_progress() -> Progress:
    p = Progress(io.StringIO(), force=False)
    p.update(FitStarted("nuts", 200, 2, {"num_warmup": 100, "num_samples": 100}))

    def report(chain, phase, step, t, acc, div, eps=0.25):
        p.update(FitProgress("nuts", phase, step, 100, chain,
                             {"accept_prob": acc, "step_size": eps, "divergences": div}, t))
    report(0, "warmup", 10, 1.0, 0.70, 0)
    report(0, "warmup", 60, 2.0, 0.85, 0)  # 50 steps/s in warmup
    report(1, "warmup", 100, 1.0, 0.80, 0)
    report(1, "sampling", 20, 3.0, 0.90, 1)
    report(1, "sampling", 70, 4.0, 0.91, 3, eps=0.125)  # 50 draws/s in sampling
    return p


def test_nothing_is_drawn_before_the_fit_starts():
    p = Progress(io.StringIO(), force=False)
    assert text_of(p).strip() == ""


def test_mcmc_rows_show_phase_acceptance_divergences_and_eta_per_chain():
    text = text_of(nuts_progress())
    assert text.splitlines()[0].split() == ["chain", "phase", "step", "draws/s", "accept",
                                           "step", "size", "diverg.", "ETA"]
    got = rows(text)
    # chain 0: 40 warmup steps left at 50/s, then 100 draws bounded by the warmup rate
    assert got["0"] == ["0", "warmup", "60/100", "50.0", "0.85", "0.25", "0", "00:03"]
    # chain 1: sampling, 30 draws left at 50/s; its three divergences
    assert got["1"] == ["1", "sampling", "70/100", "50.0", "0.91", "0.125", "3", "00:01"]


def test_svi_and_smc_rows():
    p = Progress(io.StringIO(), force=False)
    p.update(FitStarted("svi", 1000, 1, {"steps": 1000}))
    p.update(FitProgress("svi", "optimization", 100, 1000, 0, {"loss": 12.5}, 1.0))
    p.update(FitProgress("svi", "optimization", 300, 1000, 0, {"loss": 10.25}, 2.0))
    text = text_of(p)
    assert text.splitlines()[0].split() == ["step", "steps/s", "loss", "ETA"]
    assert rows(text)["svi"] == ["svi", "300/1000", "200.0", "10.25", "00:04"]
    p = Progress(io.StringIO(), force=False)
    p.update(FitStarted("smc", 20, 1, {"max_len": 20}))
    p.update(FitProgress("smc", "generation", 4, 20, 0,
                         {"ess": 7.5, "num_finished": 2.0, "log_Z": -3.25}, 0.5))
    text = text_of(p)
    assert text.splitlines()[0].split() == ["step", "ESS", "finished", "log", "Z", "ETA"]
    assert rows(text)["smc"] == ["smc", "4/20", "7.5", "2", "-3.2500", "--:--"]


def test_without_a_terminal_a_plain_line_every_ten_seconds_of_fit_time():
    """A pipe (CI, the README command piped) sees the fit progress: one line per 10 s of
    fit time (the events' own clock, so this does not depend on the machine's speed)."""
    from qvr.commands.progress import PLAIN_PREFIX
    out = io.StringIO()
    p = Progress(out, force=False)
    p.update(FitStarted("svi", 1000, 1, {}))
    for step, t, loss in [(10, 2.0, 90.0), (50, 9.9, 60.0), (60, 10.0, 55.0), (70, 12.0, 50.0),
                          (150, 31.5, 20.0)]:
        p.update(FitProgress("svi", "optimization", step, 1000, 0, {"loss": loss}, t))
    lines = out.getvalue().splitlines()
    assert all(line.startswith(PLAIN_PREFIX) for line in lines)
    assert [line[len(PLAIN_PREFIX):].split(",")[0] for line in lines] == \
        ["svi step 60/1000", "svi step 150/1000"]
    # the rate counts from the phase's first report: (150 - 10) / (31.5 - 2)
    assert lines[1] == f"{PLAIN_PREFIX}svi step 150/1000, 4.7 steps/s, loss 20, ETA 02:59"


def test_a_plain_mcmc_line_follows_the_chain_furthest_behind():
    from qvr.commands.progress import PLAIN_PREFIX
    p = nuts_progress()  # chain 0 still in warmup at 60/100, chain 1 sampling
    p.update(FitProgress("nuts", "warmup", 70, 100, 0,
                         {"accept_prob": 0.8, "step_size": 0.25, "divergences": 0}, 10.0))
    text = p.stream.getvalue()
    assert text == (f"{PLAIN_PREFIX}nuts warmup 70/100, 6.7 draws/s (chain 0), accept 0.80, "
                    f"divergences 3, ETA 00:20\n")


def test_on_a_terminal_no_plain_lines():
    out = io.StringIO()
    p = Progress(out, force=True)
    p.update(FitStarted("svi", 10, 1, {}))
    p.update(FitProgress("svi", "optimization", 5, 10, 0, {"loss": 1.0}, 50.0))
    assert out.getvalue() == ""


def test_without_a_terminal_a_warning_is_one_line_at_once():
    from qvr.events import FitWarning
    out = io.StringIO()
    p = Progress(out, force=False)
    p.update(FitStarted("svi", 10, 1, {}))
    p.update(FitWarning("drew 200 synthetic rows instead of 20"))
    assert out.getvalue() == "qvr run: warning: drew 200 synthetic rows instead of 20\n"
    assert p.warnings == ["drew 200 synthetic rows instead of 20"]
    on_terminal = io.StringIO()
    q = Progress(on_terminal, force=True)
    q.update(FitWarning("shown in the live table"))
    assert on_terminal.getvalue() == "" and q.warnings == ["shown in the live table"]


def test_a_note_is_the_tables_title_until_the_chains_move_and_a_line_without_a_terminal():
    from qvr.events import FitNote
    note = "compiling the NUTS transition to C++ (the first run of this model)"
    p = Progress(io.StringIO(), force=False)
    p.update(FitStarted("nuts", 200, 2, {"num_warmup": 100, "num_samples": 100}))
    p.update(FitNote(note))
    assert p.stream.getvalue() == f"qvr run: {note}\n"
    assert text_of(p).splitlines()[0].strip() == note
    p.update(FitProgress("nuts", "warmup", 1, 100, 0, {"accept_prob": 0.5}, 1.0))
    assert note not in text_of(p)


def test_a_plain_line_before_every_chain_reported_follows_those_that_did():
    """After a long compile the first progress event comes past the first line's 10 s:
    the line follows the chains that reported, not a chain still at 0/0 with no rate."""
    from qvr.commands.progress import PLAIN_PREFIX
    out = io.StringIO()
    p = Progress(out, force=False)
    p.update(FitStarted("nuts", 200, 2, {"num_warmup": 100, "num_samples": 100}))
    p.update(FitProgress("nuts", "warmup", 64, 100, 0,
                         {"accept_prob": 0.75, "step_size": 0.3, "divergences": 1}, 36.0))
    assert out.getvalue() == (f"{PLAIN_PREFIX}nuts warmup 64/100, - draws/s (chain 0), "
                              f"accept 0.75, divergences 1, ETA --:--\n")


def test_importance_rounds_after_the_fit():
    """``--resample amis`` reports its rounds (phase ``importance``): a line below the
    fit's row on a terminal (the row stays as the fit left it), its first and last rounds
    as plain lines otherwise."""
    p = Progress(io.StringIO(), force=False)
    p.update(FitStarted("svi", 100, 1, {"steps": 100}))
    p.update(FitProgress("svi", "optimization", 100, 100, 0, {"loss": 12.5}, 1.0))
    for r in range(1, 9):
        p.update(FitProgress("svi", "importance", r, 8, 0, {"ess": 100.0 * r}, 1.0 + r))
    lines = text_of(p).splitlines()
    assert rows("\n".join(lines[:2]))["svi"][1:3] == ["100/100", "-"]
    assert lines[2].strip() == "importance sampling: round 8 of 8, ESS 800"
    plain = io.StringIO()
    q = Progress(plain, force=False)
    q.update(FitStarted("pathfinder", 100, 4, {}))
    for r in range(1, 9):
        q.update(FitProgress("pathfinder", "importance", r, 8, 0, {"ess": 1234.4 * r}, 1.0))
    assert plain.getvalue().splitlines() == [
        "qvr run: progress: importance sampling: round 1 of 8, ESS 1,234",
        "qvr run: progress: importance sampling: round 8 of 8, ESS 9,875"]
    assert all(ch.step == 0 for ch in q.chains.values())  # no path moved by the rounds

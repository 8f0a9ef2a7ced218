"""E9.10 at run time: a family argument that is a let-expression is compiled as `let tmp =
<expr>` and gives exactly the log density (total and per-row terms) of the program written
with the let; comparisons, `and`/`or`/`not`, `where`, `step` and `int_step` against numpy,
their dtypes and gradients (none through a test, the chosen branch's through `where`), and
the same under `torch.func.vmap`."""
import numpy as np
import pytest
import torch

from qvr import loads

HEAD = """object Row : FinSet 6
object Coef : FinSet 2
object K : FinSet 3
"""


def prog(body: str):
    lines = "\n".join("    " + line for line in body.strip("\n").split("\n"))
    return loads(HEAD + f"\nprogram p : Row -> Row\n{lines}\n\nexport p\n").morphism


X = torch.zeros(6, 1)
HEIGHT = torch.tensor([-1.0, -0.25, 0.0, 0.5, 1.5, 2.0])
AGE = torch.tensor([0, 1, 2, 2, 3, 1])
EARN = torch.tensor([0.1, -0.3, 0.8, 1.2, 2.5, 1.9])
VALUES = {"height": HEIGHT, "age": AGE, "earn": EARN, "beta": torch.tensor([0.3, -0.7]),
          "sigma": torch.tensor(0.8)}

PRELUDE = """
data height : Row
data age : Row
sample beta : Coef <- Normal(0.0, 1.0)
sample sigma <- HalfNormal(1.0)
"""

ARGS = [
    "beta[0] + beta[1] * height",
    "where(height > 0, height, 0) * beta[1]",
    "beta[0] * (age == 2) + step(height) - int_step(age)",
    "exp(beta[0]) * (not height < 0 and age != 1 or age >= 3)",
]


@pytest.mark.parametrize("arg", ARGS)
def test_expression_argument_equals_the_let_exactly(arg):
    inline = prog(PRELUDE + f"observe earn : Row <- Normal({arg}, sigma * 2.0)\nreturn earn")
    via_let = prog(PRELUDE + f"let m = {arg}\nlet s2 = sigma * 2.0\n"
                             f"observe earn : Row <- Normal(m, s2)\nreturn earn")
    a, b = inline.execute(X, VALUES), via_let.execute(X, VALUES)
    assert torch.equal(a.log_joint, b.log_joint)
    assert torch.equal(a.sites["earn"].log_prob, b.sites["earn"].log_prob)  # pointwise terms per row
    assert a.sites["earn"].log_prob.shape == (6,)


def test_expression_arguments_of_sample_and_marginalize_targets():
    """A global sample site whose argument reads globals only, and a marginalize target."""
    inline = prog(PRELUDE + """
sample shift <- Normal(beta[0] * 2.0, exp(beta[1]))
marginalize z <- Bernoulli(sigmoid(shift - 1.0))
    observe earn : Row <- Normal(shift * z + beta[1], sigma)
return shift""")
    via_let = prog(PRELUDE + """
let m0 = beta[0] * 2.0
let s0 = exp(beta[1])
sample shift <- Normal(m0, s0)
let p = sigmoid(shift - 1.0)
marginalize z <- Bernoulli(p)
    let mu = shift * z + beta[1]
    observe earn : Row <- Normal(mu, sigma)
return shift""")
    vals = {**VALUES, "shift": torch.tensor(0.4)}
    a, b = inline.execute(X, vals), via_let.execute(X, vals)
    assert torch.equal(a.log_joint, b.log_joint)
    shift_site = a.sites["shift"]
    ref = torch.distributions.Normal(0.3 * 2.0, torch.exp(torch.tensor(-0.7))).log_prob(torch.tensor(0.4))
    assert torch.allclose(shift_site.contribution, ref)


def test_an_index_argument_and_the_grouped_bracket_argument():
    """`loc[k]` outside a grouped block is an index (as in a let); `loc[seg]` in the block
    of `seg` stays the bracketed argument, and `loc[0] + loc[seg]` equals its let form."""
    src = """object Customer : FinSet 3
object Seg : FinSet 2
object Buy : FinSet 5
program p : Buy -> Buy
    sample share <- Dirichlet(2.0) [over=Seg]
    sample loc : Seg <- Normal(0.0, 1.0)
    marginalize seg : Seg <- Categorical(share) [over=Customer]
{body}
    return share
export p
"""
    inline = "        observe amount : Buy <- Normal(loc[seg] + loc[0] * 2.0, 0.5) [via=buyer_of]"
    via_let = ("        let m = loc[seg] + loc[0] * 2.0\n"
               "        observe amount : Buy <- Normal(m, 0.5) [via=buyer_of]")
    bracket = "        observe amount : Buy <- Normal(loc[seg], 0.5) [via=buyer_of]"
    vals = {"share": torch.tensor([0.3, 0.7]), "loc": torch.tensor([-1.0, 2.0]),
            "amount": torch.tensor([0.5, -0.2, 1.9, 2.2, -1.1]),
            "buyer_of": torch.tensor([0, 0, 1, 2, 2])}
    x = torch.zeros(5, 1)
    lj = {k: loads(src.format(body=b)).morphism.execute(x, vals).log_joint
          for k, b in (("inline", inline), ("let", via_let), ("bracket", bracket))}
    assert torch.equal(lj["inline"], lj["let"])
    # the bracketed argument: per customer, logsumexp over segments of its purchases' terms
    share, loc, amount, buyer = vals["share"], vals["loc"], vals["amount"], vals["buyer_of"]
    total = torch.distributions.Dirichlet(torch.full((2,), 2.0)).log_prob(share)
    total = total + torch.distributions.Normal(0.0, 1.0).log_prob(loc).sum()
    for c in range(3):
        rows = amount[buyer == c]
        per = torch.stack([torch.log(share[k]) + torch.distributions.Normal(loc[k], 0.5).log_prob(rows).sum()
                           for k in range(2)])
        total = total + torch.logsumexp(per, 0)
    assert torch.allclose(lj["bracket"].sum(), total, atol=1e-5)


# ---------------------------------------------------------------- comparisons, where, step

def run(body: str, values: dict):
    ex = prog(body).execute(X, values, score=True)
    return {k: r.value for k, r in ex.sites.items()}


def test_comparisons_booleans_where_and_indicators_match_numpy():
    h = np.array([-1.0, -0.25, 0.0, 0.5, np.nan, 2.0])
    g = np.array([0, 1, 2, 2, 3, 1])
    out = run("""
data x : Row
data g : Row
let pos = where(x > 0, x, 0)
let two = g == 2
let ne = g != 2
let lt = x < 0.5
let le = x <= 0.5
let gt = x > 0
let ge = x >= 0
let both = x >= 0 and g < 3
let either = not x >= 0 or g == 1
let st = step(x)
let ist = int_step(x)
let mixed = 3.0 * (g == 2) + where(g > 1, 10.0, -10.0)
sample b <- Normal(0.0, 1.0)
return b""", {"x": torch.tensor(h, dtype=torch.float32), "g": torch.tensor(g), "b": torch.tensor(0.0)})
    with np.errstate(invalid="ignore"):
        ref = {
            "pos": np.where(h > 0, h, 0.0), "two": (g == 2) * 1.0, "ne": (g != 2) * 1.0,
            "lt": (h < 0.5) * 1.0, "le": (h <= 0.5) * 1.0, "gt": (h > 0) * 1.0, "ge": (h >= 0) * 1.0,
            "both": ((h >= 0) & (g < 3)) * 1.0, "either": (~(h >= 0) | (g == 1)) * 1.0,
            # Stan: step(x) is 0 only for x < 0 (step(0) = step(NaN) = 1); int_step(x) is 1 for x > 0
            "st": np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), "ist": np.array([0.0, 0.0, 0.0, 1.0, 0.0, 1.0]),
            "mixed": 3.0 * (g == 2) + np.where(g > 1, 10.0, -10.0),
        }
    for k, v in ref.items():
        got = out[k]
        assert got.dtype == torch.float32, k
        np.testing.assert_array_equal(got.numpy(), v, err_msg=k)


def test_dtypes_follow_the_operands():
    out = run("""
data x : Row
data g : Row
let a = x > 0
let b = g == 2
sample s <- Normal(0.0, 1.0)
return s""", {"x": HEIGHT.double(), "g": AGE, "s": torch.tensor(0.0)})
    assert out["a"].dtype == torch.float64
    assert out["b"].dtype == torch.get_default_dtype()


def test_gradients_skip_the_test_and_follow_the_chosen_branch():
    model = prog("""
data x : Row
sample b <- Normal(0.0, 1.0)
score s = sum(where(b * x > 0, b * b * x, 3.0 * b * x) + b * (b > 0.5) + step(b))
return b""")
    x = HEIGHT

    def total(b):
        return model.log_joint_total(X, {"x": x, "b": b})
    for bv in (0.8, -0.6):
        b = torch.tensor(bv, requires_grad=True)
        (g,) = torch.autograd.grad(total(b), b)
        bx = bv * x
        # d/db of the where: 2 b x where b x > 0, else 3 x; of b * (b > 0.5), broadcast
        # over the 6 rows before the sum: 6 (b > 0.5); of step(b): 0; of the prior: -b
        expect = torch.where(bx > 0, 2 * bv * x, 3 * x).sum() + 6 * float(bv > 0.5) - bv
        assert torch.allclose(g, expect, atol=1e-5), (bv, g, expect)


def test_comparisons_and_where_under_vmap():
    from torch.func import grad, vmap
    model = prog(PRELUDE + """
observe earn : Row <- Normal(where(height > 0, beta[0] * height, beta[1]) + (age == 2), sigma)
return earn""")
    obs = {"height": HEIGHT, "age": AGE, "earn": EARN}

    def lp(beta, sigma):
        return model.log_joint_total(X, {**obs, "beta": beta, "sigma": sigma})
    betas, sigmas = torch.randn(4, 2, generator=torch.Generator().manual_seed(0)), torch.rand(4) + 0.5
    loop = torch.stack([lp(b, s) for b, s in zip(betas, sigmas)])
    assert torch.allclose(vmap(lp)(betas, sigmas), loop, atol=1e-5)
    g_loop = torch.stack([grad(lp)(b, s) for b, s in zip(betas, sigmas)])
    assert torch.allclose(vmap(grad(lp))(betas, sigmas), g_loop, atol=1e-5)


def test_per_row_mixture_with_an_index_argument_equals_its_closed_form():
    """`Normal(centres[comp], 1.0)` in `marginalize comp : Point` (a QVR411 before E9.10):
    the per-row mixture sum_n logsumexp_k [log w_k + log N(x_n | c_k, 1)], as its let form."""
    src = """object Component : FinSet 3
object Point : FinSet 5
program p : Point -> Point
    sample weights <- Dirichlet(1.0) [over=Component]
    sample centres : Component <- Normal(0.0, 10.0)
    marginalize comp : Point <- Categorical(weights)
{body}
    return centres
export p
"""
    inline = "        observe x : Point <- Normal(centres[comp], 1.0)"
    via_let = "        let m = centres[comp]\n        observe x : Point <- Normal(m, 1.0)"
    w, c = torch.tensor([0.2, 0.5, 0.3]), torch.tensor([-4.0, 0.0, 3.0])
    xs = torch.tensor([-3.5, 0.2, 2.9, 0.7, -1.0])
    vals = {"weights": w, "centres": c, "x": xs}
    x = torch.zeros(5, 1)
    a = loads(src.format(body=inline)).morphism.execute(x, vals)
    b = loads(src.format(body=via_let)).morphism.execute(x, vals)
    assert torch.equal(a.log_joint, b.log_joint)
    prior = torch.distributions.Dirichlet(torch.ones(3)).log_prob(w) + \
        torch.distributions.Normal(0.0, 10.0).log_prob(c).sum()
    mix = torch.logsumexp(torch.log(w) + torch.distributions.Normal(c, 1.0).log_prob(xs[:, None]), 1).sum()
    assert torch.allclose(a.log_joint.sum(), prior + mix, atol=1e-5)

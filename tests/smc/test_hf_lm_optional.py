"""The library imports without transformers (issue 40: `--lm` is an optional extra)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_qvr_imports_and_runs_smc_without_transformers(tmp_path):
    code = (
        "import sys; sys.modules['transformers'] = None; sys.modules['tokenizers'] = None\n"
        "import qvr.smc, qvr.smc.hf_lm, qvr.smc.text_potentials\n"
        "import qvr.inference.methods.smc, qvr.inference.methods.smc_lm\n"
        "from qvr.cli import main\n"
        f"rc = main(['run', {str(ROOT / 'examples' / 'steer.qvr')!r}, '--method', 'smc', "
        f"'--lm', {str(ROOT / 'examples' / 'tiny_lm')!r}, '--runs-dir', {str(tmp_path)!r}])\n"
        "print('rc', rc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip().endswith("rc 1"), out.stderr
    assert ('a pretrained language model (--lm, role=pretrained) needs Hugging Face '
            'transformers: pip install -e ".[lm]" (transformers, tokenizers)') in out.stderr

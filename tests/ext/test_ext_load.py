"""Loading and unloading the extension, its settings, and the engine's independence of IPython."""

from __future__ import annotations

import subprocess
import sys

import pytest
from IPython.core.error import UsageError

import kernel_ext


def registered(shell) -> dict[str, bool]:
    manager = shell.magics_manager
    return {
        "line": "terra" in manager.magics["line"],
        "cell": "terra" in manager.magics["cell"],
        "registry": "TerraMagics" in manager.registry,
        "config": any(type(c).__name__ == "TerraMagics" for c in shell.configurables),
    }


def test_unload_removes_everything_and_load_twice_is_harmless(ip):
    assert set(registered(ip).values()) == {True}
    magics = ip.magics_manager.registry["TerraMagics"]
    kernel_ext.load_ipython_extension(ip)  # again: nothing changes
    assert ip.magics_manager.registry["TerraMagics"] is magics
    assert sum(type(c).__name__ == "TerraMagics" for c in ip.configurables) == 1
    kernel_ext.unload_ipython_extension(ip)
    assert set(registered(ip).values()) == {False}
    with pytest.raises(UsageError, match="Cell magic `%%terra` not found"):
        ip.run_cell_magic("terra", "", "x = 1")
    kernel_ext.unload_ipython_extension(ip)  # unloading twice is harmless too
    kernel_ext.load_ipython_extension(ip)
    assert set(registered(ip).values()) == {True}


def test_load_ext_names(ip):
    kernel_ext.unload_ipython_extension(ip)
    ip.extension_manager.loaded.discard("terra_nb")
    ip.extension_manager.loaded.discard("kernel_ext")
    for name in ("terra_nb", "kernel_ext"):
        assert ip.run_line_magic("load_ext", name) is None
        assert set(registered(ip).values()) == {True}
        ip.run_line_magic("unload_ext", name)
        assert set(registered(ip).values()) == {False}
    ip.run_line_magic("load_ext", "terra_nb")
    ip.run_line_magic("load_ext", "kernel_ext")  # the same magics under the other name
    assert sum(type(c).__name__ == "TerraMagics" for c in ip.configurables) == 1


def test_config_settings_apply(ip, capsys):
    ip.run_line_magic("config", "TerraMagics.default_mode = 'eager'")
    ip.run_line_magic("config", "TerraMagics.max_fallbacks = 2")
    ip.run_line_magic("config", "TerraMagics.quiet = True")
    assert ip.run_cell("%%terra\nfor i in range(2):\n    pass\n").success
    terra = ip.magics_manager.registry["TerraMagics"].runner.last
    assert (terra.mode, terra.max_fallbacks) == ("eager", 2)
    assert {s.phase for s in terra.stats} == {"eager"}
    assert "terra[" not in capsys.readouterr().out
    ip.run_line_magic("config", "TerraMagics.default_mode = 'fast'")  # refused, logged
    assert ip.magics_manager.registry["TerraMagics"].default_mode == "eager"
    ip.run_line_magic("config", "TerraMagics")
    assert "default_mode" in capsys.readouterr().out


def test_help_lists_every_option(ip):
    doc = ip.find_cell_magic("terra").__doc__
    options = ("--mode", "--viz", "--no-viz", "--max-fallbacks", "--strict", "--xla",
               "--compile-after", "--program", "--regions", "--no-regions", "--no-tapes",
               "--shared-cores", "--quiet")
    for option in options:
        assert option in doc
    line_doc = ip.find_line_magic("terra").__doc__
    for command in ("status", "explain", "graph", "timeline", "export", "reset"):
        assert command in line_doc


def test_engine_works_without_ipython():
    code = (
        "import sys\n"
        "sys.modules['IPython'] = None  # any import of IPython fails\n"
        "import terra_nb\n"
        "with terra_nb.Terra(mode='trace') as t:\n"
        "    for i in t.loop(range(2)):\n"
        "        pass\n"
        "assert len(t.stats) == 2\n"
        "assert 'kernel_ext' not in sys.modules\n"
    )
    env_run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert env_run.returncode == 0, env_run.stderr[-2000:]


def test_loading_the_extension_imports_tensorflow_without_its_start_up_log():
    """TensorFlow 2.21 writes its absl and oneDNN notes to stderr from C++ whatever
    TF_CPP_MIN_LOG_LEVEL says: a pink box under every notebook's first cell. ``%load_ext
    terra_nb`` imports it with them silenced."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("from IPython.testing.globalipapp import start_ipython\n"
            "ip = start_ipython()\nip.run_line_magic('load_ext', 'terra_nb')\n"
            "import sys\nprint('tensorflow' in sys.modules)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.stdout.strip().endswith("True"), done
    assert "absl" not in done.stderr and "oneDNN" not in done.stderr, done.stderr

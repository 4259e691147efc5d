import subprocess
import sys

from fuel.cli import main


def test_kernels_lists_the_table_filtered(capsys):
    assert main(["kernels", "--op", "matmul", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "float32, float32 -> float32" in out and "numpy" in out
    assert "softmax" not in out


def test_kernels_rejects_unknown_op(capsys):
    assert main(["kernels", "--op", "nonsense"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_backends_lists_cpu(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "available" in out and "NumPy" in out


def test_console_script_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "fuel.cli", "kernels", "--op", "relu"],
                          capture_output=True, text=True, check=True)
    assert "relu" in done.stdout


def test_version_from_the_command_and_python_dash_m():
    import fuel

    for command in (["-m", "fuel", "--version"], ["-m", "fuel.cli", "--version"]):
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True,
                              check=True)
        assert done.stdout.strip() == f"fuel {fuel.__version__}"


def test_python_dash_m_fuel_runs_commands():
    done = subprocess.run([sys.executable, "-m", "fuel", "kernels", "--op", "relu"],
                          capture_output=True, text=True, check=True)
    assert "relu" in done.stdout


def test_kernels_into_a_closed_pipe_prints_no_traceback():
    process = subprocess.Popen([sys.executable, "-m", "fuel", "kernels"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()  # like `fuel kernels | head -1`
    process.stdout.close()
    error = process.stderr.read().decode()
    process.stderr.close()
    process.wait(timeout=60)
    assert first.startswith(b"op ")
    assert "Traceback" not in error and "BrokenPipeError" not in error


def test_kernels_columns_stay_apart_for_long_op_names(capsys):
    assert main(["kernels"]) == 0
    lines = capsys.readouterr().out.splitlines()[:-1]
    longest = max(len(line.split()[0]) for line in lines)
    assert longest >= 16  # e.g. max_pool_indices
    start = lines[0].index("backend")
    for line in lines:
        assert line[start - 2:start] == "  " and line[start] != " ", line


def test_kernels_unknown_backend_names_the_backends(capsys):
    assert main(["kernels", "--backend", "foo"]) == 2
    error = capsys.readouterr().err
    assert "unknown backend 'foo'" in error and "cpu" in error and "opencl" in error
    assert "fuel backends" in error and "BackendId" not in error


def test_help_shows_no_markup():
    from fuel.cli import build_parser

    parser = build_parser()
    texts = [parser.format_help()]
    commands = parser._subparsers._group_actions[0].choices
    texts += [command.format_help() for command in commands.values()]
    assert len(texts) > 5
    for text in texts:
        assert "``" not in text and ":func:" not in text


def test_install_hint_fits_a_checkout_and_an_install(monkeypatch):
    import fuel.extras as extras

    checkout = extras.source_checkout()
    if checkout is not None:  # the tests run from a checkout
        assert extras.install_command("serve") == f"pip install -e '{checkout}[serve]'"
    monkeypatch.setattr(extras, "source_checkout", lambda: None)
    assert extras.install_command("serve") == "pip install 'pyfuel[serve]'"

"""The README's two set-up commands stay true: CI runs the test command verbatim."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```bash\n")[1:]
    return [block.split("```", 1)[0].strip() for block in blocks]


def test_readme_has_exactly_two_setup_commands_demo_then_tests():
    demo, tests = readme_commands()
    assert demo.startswith("pip install torch==2.13.0 &&") and demo.endswith("nbtrace demo")
    assert tests.startswith("pip install torch==2.13.0 &&") and "pytest" in tests


def test_ci_runs_the_readme_test_command_verbatim():
    _, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == tests
    assert any("apt-get install" in line and "chromium" in line for line in ci)
    assert any(line.startswith("python -m pip install") and "torch==2.13.0" in line for line in ci)

"""Every numeric option goes through runner.cli.options.number: finite, in range, one line and exit 2
otherwise, before anything runs (goodput raised ZeroDivisionError on --fixed-s inf, purge an
OverflowError on --timeout-s inf, --mask-penalty-pct nan priced every figure nan at exit 0)."""

from __future__ import annotations

import argparse

import pytest

from runner.cli import main
from runner.cli.options import nonneg_seconds, percent, positive_int, positive_seconds

GOODPUT = ["goodput", "--host", "h", "--profile-checkpoint", "c", "--store", "{tmp}"]


def one_line_exit_2(capsys, argv: list[str], option: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"argument {option}: expected " in err, err
    return err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--fixed-s", "inf"),
        ("--fixed-s", "1e308"),
        ("--linear-s", "inf"),
        ("--linear-s", "1e308"),
        ("--quadratic-s", "inf"),
        ("--quadratic-s", "1e308"),
        ("--mask-penalty-pct", "inf"),
        ("--mask-penalty-pct", "nan"),
        ("--mask-penalty-pct", "-1"),
        ("--fit-max-len", "-1"),
        ("--fit-max-len", "0"),
        ("--new-shape-s", "nan"),
    ],
)
def test_goodput_numbers_out_of_range_are_one_line(capsys, tmp_path, option, value):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in GOODPUT] + [option, value]
    err = one_line_exit_2(capsys, argv, option)
    assert repr(value) in err


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-5", "1e308"])
@pytest.mark.parametrize("recover", [False, True])
def test_purge_timeout_is_finite_and_positive(capsys, tmp_path, value, recover):
    argv = ["purge", "--cluster", str(tmp_path / "none.yaml"), "--timeout-s", value]
    one_line_exit_2(capsys, argv + (["--recover"] if recover else []), "--timeout-s")


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "--probe", "padding", "--threshold-pct", "inf"],
        ["history", "--probe", "padding", "--max-spread-pct", "nan"],
        ["sweep", "--timeout-s", "1e308"],
        ["sweep", "--gpu-wait-s", "inf"],
        ["idle", "--connect-timeout-s", "inf"],
        ["store", "vacuum", "--retention-days", "1e308"],
    ],
)
def test_other_commands_numbers_go_through_the_same_validator(capsys, argv):
    one_line_exit_2(capsys, argv, argv[-2])


def test_the_validator_takes_what_is_in_range_and_only_that():
    assert positive_seconds("2.5") == 2.5 and nonneg_seconds("0") == 0.0 and percent("100") == 100.0
    assert positive_int(" 7 ") == 7 and isinstance(positive_int("7"), int)
    for parse, bad in [
        (positive_seconds, ["0", "-1", "inf", "-inf", "nan", "1e308", "", "ten"]),
        (nonneg_seconds, ["-0.001", "nan", "1e8"]),
        (percent, ["-1", "nan", "inf", "1e5"]),
        (positive_int, ["0", "-1", "3.5", "1e3", "nan", "inf", str(2**53 + 1)]),
    ]:
        for text in bad:
            with pytest.raises(argparse.ArgumentTypeError, match="expected"):
                parse(text)


@pytest.mark.parametrize("value", ["5e-324", "1e-320", "-4e-310"])
def test_a_subnormal_float_is_refused_it_priced_every_figure_nan(value):
    """--fixed-s/--linear-s/--quadratic-s 5e-324: goodput priced each strategy's goodput nan, the best
    goodput inf and picked 'fixed' as best, exit 0. A float below the smallest normal one is no number
    of seconds, percent or days anyone means."""
    from runner.cli.options import finite_float, nonneg_float

    for parse in (nonneg_seconds, positive_seconds, percent, nonneg_float, finite_float):
        if parse is finite_float or not value.startswith("-"):
            with pytest.raises(argparse.ArgumentTypeError, match="expected"):
                parse(value)
    assert nonneg_seconds("2.3e-308") == 2.3e-308  # the smallest normal floats still pass

"""`labprobe goodput --host H --profile-checkpoint C [--stack-from-store] [GOODPUT OPTIONS]`: the goodput probe
priced with the newest ok profile of checkpoint C on host H in the store (with --stack-from-store, also with
a stack's measured step from the newest ok carrier of C on H), and the lab's budget (cluster.yaml's
`budget`) as the default of its projection."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import probes
from probes.result import InputError
from runner.analysis.stored_profile import carrier_from_store, profile_from_store
from runner.cli.options import add_config_options, build_config, options_named
from runner.cli.probe import show
from runner.lab.budget import with_budget
from runner.lab.cluster import load_cluster
from runner.store.store import Store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", required=True, help="the host whose stored profile prices the steps")
    parser.add_argument("--profile-checkpoint", required=True, help="the checkpoint's name in the store")
    parser.add_argument(
        "--cluster",
        type=Path,
        default=None,
        help="the lab's file: its store root and budget (default: ./cluster.yaml, if present)",
    )
    parser.add_argument("--store", type=Path, default=None, help="the store root (default: cluster.yaml's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument(
        "--stack-from-store",
        action="store_true",
        help="price with a stack's measured step from the newest ok carrier of the checkpoint on the host "
        "(--stack names the row; unset: the fastest measured ok), instead of --stack-json FILE",
    )
    add_config_options(parser, probes.get("goodput").Config, exclude=("profile",))  # the profile comes from the store


def main(args: argparse.Namespace) -> int:
    path = args.cluster or Path("cluster.yaml")
    cluster = load_cluster(path) if args.cluster is not None or path.is_file() else None
    store = Store(args.store or (cluster.store_root() if cluster else Path("results")))
    profile = profile_from_store(store, host=args.host, checkpoint=args.profile_checkpoint)
    if args.stack_from_store and hasattr(args, "stack_json"):
        raise InputError("give --stack-from-store or --stack-json, not both")
    carrier = (
        carrier_from_store(store, host=args.host, checkpoint=args.profile_checkpoint) if args.stack_from_store else None
    )
    for field, value in with_budget(cluster.spec.budget if cluster else None, "goodput", {}).items():
        if not hasattr(args, field):  # an option given on the command line wins over the lab's budget
            setattr(args, field, value)
    with tempfile.TemporaryDirectory() as tmp:
        args.profile = Path(tmp) / "profile.json"
        args.profile.write_text(json.dumps(profile))
        stored = {str(args.profile): profile["source"]}
        if carrier is not None:
            args.stack_json = Path(tmp) / "carrier.json"
            args.stack_json.write_text(json.dumps(carrier))
            stored[str(args.stack_json)] = carrier["source"]
        goodput = probes.get("goodput")
        config = build_config(goodput.Config, args)
        with options_named():  # a check inside run() names its field as the option it came from
            try:
                result = goodput.run(config)
            except InputError as exc:
                if type(exc) is not InputError:
                    raise
                raise InputError(_named(str(exc), stored)) from None
    for field in ("step_model", "stack_from"):  # the store's jobs, not the temporary files that carried them
        if isinstance(result.summary.get(field), str):
            result.summary[field] = _named(result.summary[field], stored)
    return show(result, as_json=args.json)


def _named(text: str, stored: dict[str, str]) -> str:
    """`text` naming the store's jobs where it names the temporary files that carried them."""
    for path, source in stored.items():
        text = text.replace(path, source)
    return text

"""`labprobe goodput --host H --profile-checkpoint C [--stack-from-store] [GOODPUT OPTIONS]`: the goodput probe
priced with the newest ok profile of checkpoint C on host H in the store (with --stack-from-store, also with
a stack's measured step from the newest ok carrier of C on H), and the lab's budget (cluster.yaml's
`budget`) as the default of its projection.

The same for any probe whose registry entry declares a `command` and its `stored_inputs`: the command is the
probe's name (this parser's prog, `labprobe NAME`), each stored input is another probe's newest ok result
handed to a Config field as a file, and nothing here names a probe."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import probes
from probes.result import InputError
from runner.analysis.stored_profile import stored_result
from runner.cli.options import add_config_options, build_config, options_named
from runner.cli.probe import show
from runner.cli.stores import add_store_option, open_store
from runner.lab.budget import with_budget
from runner.lab.cluster import load_cluster
from runner.store.store import Store


def _spec(parser: argparse.ArgumentParser) -> probes.ProbeSpec:
    """The probe this command runs: the one the command is named after (prog `labprobe NAME`)."""
    return probes.REGISTRY[parser.prog.split()[-1]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    spec = _spec(parser)
    always = [i for i in spec.stored_inputs if i.flag is None]
    parser.add_argument(
        "--host", required=True, help=f"the host whose stored {always[0].probe} prices the steps" if always else None
    )
    parser.add_argument(f"--{spec.checkpoint_option}", required=True, help="the checkpoint's name in the store")
    parser.add_argument(
        "--cluster",
        type=Path,
        default=None,
        help="the lab's file: its store root and budget (default: ./cluster.yaml, if present)",
    )
    add_store_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    for stored in spec.stored_inputs:
        if stored.flag is not None:
            parser.add_argument(f"--{_option(stored.flag)}", action="store_true", help=stored.help)
    # the always-read inputs come from the store, not from an option
    add_config_options(parser, probes.config_class(spec.name), exclude=tuple(i.field for i in always))
    parser.set_defaults(priced_probe=spec.name)


def _option(field: str) -> str:
    return field.replace("_", "-")


def _inputs(store: Store, spec: probes.ProbeSpec, args: argparse.Namespace) -> list[tuple[probes.StoredInput, dict]]:
    """Each stored input read, with the result it gives its field: the always-read ones, those whose flag was
    given."""
    checkpoint = getattr(args, spec.checkpoint_option.replace("-", "_"))
    found = []
    for stored in spec.stored_inputs:
        if stored.flag is not None:
            if not getattr(args, stored.flag):
                continue
            if hasattr(args, stored.field):
                raise InputError(f"give --{_option(stored.flag)} or --{_option(stored.field)}, not both")
        found.append(
            (stored, stored_result(store, stored.probe, host=args.host, checkpoint=checkpoint, tables=stored.tables))
        )
    return found


def main(args: argparse.Namespace) -> int:
    spec = probes.REGISTRY[args.priced_probe]
    path = args.cluster or Path("cluster.yaml")
    cluster = load_cluster(path) if args.cluster is not None or path.is_file() else None
    store = open_store(args.store, cluster)
    inputs = _inputs(store, spec, args)
    for field, value in with_budget(cluster.spec.budget if cluster else None, spec.name, {}).items():
        if not hasattr(args, field):  # an option given on the command line wins over the lab's budget
            setattr(args, field, value)
    with tempfile.TemporaryDirectory() as tmp:
        stored = {}
        for given, found in inputs:
            file = Path(tmp) / f"{given.probe}.json"
            file.write_text(json.dumps(found))
            setattr(args, given.field, file)
            stored[str(file)] = found["source"]
        module = probes.get(spec.name)
        config = build_config(module.Config, args)
        with options_named():  # a check inside run() names its field as the option it came from
            try:
                result = module.run(config)
            except InputError as exc:
                if type(exc) is not InputError:
                    raise
                raise InputError(_named(str(exc), stored)) from None
    for field, value in result.summary.items():  # the store's jobs, not the temporary files that carried them
        if isinstance(value, str):
            result.summary[field] = _named(value, stored)
    return show(result, as_json=args.json)


def _named(text: str, stored: dict[str, str]) -> str:
    """`text` naming the store's jobs where it names the temporary files that carried them."""
    for path, source in stored.items():
        text = text.replace(path, source)
    return text

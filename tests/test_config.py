"""Configuration (DESIGN section 3, C1-C4): fields, schema composition, hydration, errors, YAML round trip."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Optional

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lenscope.config import (
    MISSING,
    FieldSpec,
    field,
    format_override,
    hydrate,
    parse_override,
    schema,
    to_dict,
    to_yaml,
)
from lenscope.config.dump import nest_paths
from lenscope.errors import ConfigError, UsageError
from lenscope.training.config import TrainerConfig


@dataclass
class TrainConfig:
    seed: int = field("training/seed", default=0, help="PRNG seed")
    steps: int = field("training/steps", default=1000, help="optimizer steps")
    lr: float = field("optimization/lr", default=1e-3, help="peak learning rate")


@dataclass
class GrokConfig(TrainConfig):
    p: int = field("data/p", default=113, help="modulus")


@dataclass
class FourierConfig(TrainConfig):
    freqs: int = field("fourier/freqs", default=5, help="key frequencies to plot")
    seed_again: int = field("training/seed", default=0, help="same path, other attribute")


@dataclass
class GrokAnalysisConfig(GrokConfig, FourierConfig):
    pass


@dataclass
class Everything:
    """One field of each supported type, used by round-trip and property tests."""

    count: int = field("a/count", default=3, help="an int")
    rate: float = field("a/rate", default=0.5, help="a float")
    flag: bool = field("a/flag", default=False, help="a bool")
    name: str = field("b/name", default="run", help="a str")
    maybe: Optional[int] = field("b/maybe", default=None, help="an optional int")  # noqa: UP045 - the typing form
    mode: Literal["fast", "slow"] = field("b/mode", default="fast", help="a literal")
    sizes: list[int] = field("c/sizes", default=[1, 2], help="a list of ints")
    words: tuple[str, ...] = field("c/words", default=("x",), help="a tuple of str")
    floats: list[float] = field("c/floats", default_factory=list, help="a list of floats")
    extra: dict[str, Any] = field("c/extra", default={"k": 1}, help="free-form")
    top: str = field("top", default="t", help="a root-level key")


@dataclass
class NeedsP:
    p: int = field("data/p", help="modulus")
    q: int = field("data/q", help="second modulus")
    seed: int = field("training/seed", default=0)


def error(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# C1 / C2: fields and schemas


def test_field_spec_records_path_type_default_help_owner():
    spec = schema(GrokConfig).by_path["data/p"]
    assert spec == FieldSpec("p", "data/p", int, 113, "modulus", GrokConfig)
    assert not spec.required and schema(NeedsP).by_path["data/p"].required
    assert schema(NeedsP).by_path["data/p"].default is MISSING


def test_schema_is_cached_and_lists_paths_in_declaration_order():
    assert schema(GrokConfig) is schema(GrokConfig)
    assert schema(GrokConfig).paths() == ["training/seed", "training/steps", "optimization/lr", "data/p"]
    assert schema(GrokConfig).defaults() == {
        "training": {"seed": 0, "steps": 1000},
        "optimization": {"lr": 1e-3},
        "data": {"p": 113},
    }


def test_list_defaults_are_not_shared_between_instances():
    a, b = Everything(), Everything()
    a.sizes.append(9)
    assert b.sizes == [1, 2] and hydrate(Everything).sizes == [1, 2]


def test_fields_are_keyword_only():
    with pytest.raises(TypeError):
        TrainConfig(1)  # type: ignore[misc]
    assert TrainConfig(seed=1).seed == 1


def test_inheritance_composes_paths():
    cfg = hydrate(GrokConfig, "data/p=7", "training/seed=2")
    assert (cfg.p, cfg.seed, cfg.steps) == (7, 2, 1000)
    assert schema(GrokConfig).by_path["training/seed"].owner is TrainConfig


def test_diamond_that_agrees_composes_and_fills_every_attribute_of_a_path():
    sch = schema(GrokAnalysisConfig)
    assert set(sch.paths()) == {"training/seed", "training/steps", "optimization/lr", "data/p", "fourier/freqs"}
    cfg = hydrate(GrokAnalysisConfig, "training.seed=5")
    assert cfg.seed == cfg.seed_again == 5
    assert to_dict(cfg)["training"] == {"seed": 5, "steps": 1000}


def test_diamond_with_conflicting_default_names_path_and_both_classes():
    @dataclass
    class Left:
        steps: int = field("training/steps", default=10)

    @dataclass
    class Right:
        steps: int = field("training/steps", default=20)

    @dataclass
    class Both(Left, Right):
        pass

    message = error(schema, Both)
    assert "training/steps" in message and "Left" in message and "Right" in message
    assert "10" in message and "20" in message


def test_conflicting_type_and_siblings_refining_differently_are_errors():
    @dataclass
    class Floaty:
        steps: float = field("training/steps", default=1000.0)

    @dataclass
    class Mixed(TrainConfig, Floaty):
        pass

    message = error(schema, Mixed)
    assert "types" in message and "TrainConfig" in message and "Floaty" in message

    @dataclass
    class Long(TrainConfig):
        steps: int = field("training/steps", default=5000)

    @dataclass
    class Short(TrainConfig):
        steps: int = field("training/steps", default=10)

    @dataclass
    class Both(Long, Short):
        pass

    assert hydrate(Long).steps == 5000  # a subclass may refine its own base's default
    message = error(schema, Both)
    assert "Long" in message and "Short" in message


def test_one_attribute_two_paths_is_an_error():
    @dataclass
    class Other:
        seed: int = field("fourier/seed", default=0)

    @dataclass
    class Both(TrainConfig, Other):
        pass

    message = error(schema, Both)
    assert "'seed'" in message and "training/seed" in message and "fourier/seed" in message


def test_schema_declaration_errors():
    @dataclass
    class Plain:
        x: int = 3

    assert "lenscope.config.field" in error(schema, Plain)

    @dataclass
    class A:
        x: int = field("a/x", default=1)

    @dataclass
    class B:
        y: int = field("b/y", default=1)

    class Undecorated(A, B):
        pass

    assert "@dataclass" in error(schema, Undecorated)

    @dataclass
    class BadType:
        x: set[int] = field("a/x", default_factory=set)

    assert "a/x" in error(schema, BadType)

    @dataclass
    class BadDefault:
        x: int = field("a/x", default="many")

    message = error(schema, BadDefault)
    assert "BadDefault.x" in message and "'many'" in message and "int" in message

    @dataclass
    class BadLiteral:
        x: Literal["a", "b"] = field("a/x", default="c")

    assert "one of 'a', 'b'" in error(schema, BadLiteral)

    @dataclass
    class Nested:
        x: int = field("a/x", default=1)
        y: int = field("a/x/y", default=1)

    assert "a/x/y" in error(schema, Nested)
    assert "'training//steps'" in error(field, "training//steps")
    assert "class" in error(field, "model/class")
    assert "not both" in error(field, "a/b", default=[1], default_factory=list)
    assert "not a config class" in error(schema, dict)


# C3: hydration and precedence


def test_precedence_defaults_dict_yaml_override(tmp_path):
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("training:\n  steps: 30\n  seed: 3\n")
    base = {"training": {"steps": 20, "seed": 2}, "optimization": {"lr": 0.5}}
    cfg = hydrate(TrainConfig, base, str(yaml_file), "training/seed=4")
    assert (cfg.lr, cfg.steps, cfg.seed) == (0.5, 30, 4)
    assert hydrate(TrainConfig).steps == 1000
    same = hydrate(TrainConfig, base=base, files=[yaml_file], overrides=["training/seed=4"])
    assert same == cfg
    later = hydrate(TrainConfig, "training/seed=4", "training/seed=6")
    assert later.seed == 6


def test_dot_and_slash_overrides_are_the_same():
    assert hydrate(TrainConfig, "training.steps=7") == hydrate(TrainConfig, "training/steps=7")
    assert parse_override("a.b/c=1") == ("a/b/c", 1)


def test_override_values_parse_as_yaml_scalars():
    assert parse_override("x=1e-3") == ("x", 1e-3)
    assert parse_override("x=true") == ("x", True)
    assert parse_override("x=[1, 2]") == ("x", [1, 2])
    assert parse_override("x=null") == ("x", None)
    assert parse_override("x=hello world") == ("x", "hello world")
    assert parse_override("x=a=b") == ("x", "a=b")
    assert parse_override("x=[1,") == ("x", "[1,")  # not YAML: stays text


def test_values_are_coerced_to_the_annotation():
    cfg = hydrate(Everything, "a/rate=2", "b/name=007", "b/maybe=4", "c/words=[p, q]", "c/extra/new/deep=1")
    assert cfg.rate == 2.0 and isinstance(cfg.rate, float)
    assert cfg.name == "007" and cfg.maybe == 4 and cfg.words == ("p", "q")
    assert cfg.extra == {"k": 1, "new": {"deep": 1}}
    assert hydrate(Everything, "b/name=true").name == "true"
    assert hydrate(Everything, "b/maybe=null").maybe is None
    assert hydrate(Everything, {"c": {"extra": {"only": 2}}}).extra == {"only": 2}  # a value replaces
    assert hydrate(Everything, "b/name=${a.count}").name == "${a.count}"  # no interpolation


def test_instances_and_saved_dicts_are_sources():
    cfg = hydrate(GrokConfig, "data/p=5")
    assert hydrate(GrokAnalysisConfig, cfg).p == 5
    saved = json.loads(json.dumps(to_dict(cfg)))
    assert hydrate(GrokConfig, saved) == cfg
    assert hydrate(GrokConfig, None, saved) == cfg


# C3: errors


def test_unknown_key_names_it_and_suggests_nearest(tmp_path):
    message = error(hydrate, TrainConfig, "trainig/steps=3")
    assert "'trainig/steps'" in message and "did you mean training/steps" in message
    message = error(hydrate, TrainConfig, {"optimization": {"lrr": 1}})
    assert "'optimization/lrr'" in message and "optimization/lr" in message
    yaml_file = tmp_path / "bad.yaml"
    yaml_file.write_text("training:\n  sed: 1\n")
    message = error(hydrate, TrainConfig, yaml_file)
    assert "'training/sed'" in message and "bad.yaml" in message and "training/seed" in message
    assert "section" in error(hydrate, TrainConfig, "training=3")


@pytest.mark.parametrize(
    ("override", "expected", "given"),
    [
        ("training/steps=abc", "expected int", "got 'abc'"),
        ("training/steps=2.5", "expected int", "got 2.5"),
        ("optimization/lr=fast", "expected float", "got 'fast'"),
        ("optimization/lr=true", "expected float", "got True"),
    ],
)
def test_wrong_type_names_path_expected_and_given(override, expected, given):
    message = error(hydrate, TrainConfig, override)
    assert message.startswith(override.split("=")[0] + ": ")
    assert expected in message and given in message and f"(from override {override})" in message


def test_wrong_type_in_containers_and_files(tmp_path):
    message = error(hydrate, Everything, "c/sizes=[1, x]")
    assert "c/sizes: expected list[int], got [1, 'x']" in message
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("a:\n  flag: maybe\n")
    message = error(hydrate, Everything, yaml_file)
    assert "a/flag: expected bool, got 'maybe'" in message and "run.yaml" in message
    assert "expected int" in error(hydrate, Everything, {"a": {"count": None}})


def test_literal_error_lists_choices():
    message = error(hydrate, Everything, "b/mode=medium")
    assert message == "b/mode: expected one of 'fast', 'slow', got 'medium' (from override b/mode=medium)"


def test_missing_required_lists_paths_and_help():
    message = error(hydrate, NeedsP)
    assert "data/p (modulus)" in message and "data/q (second modulus)" in message
    assert "training/seed" not in message
    assert "data/q (second modulus)" in error(hydrate, NeedsP, "data/p=3")
    assert hydrate(NeedsP, "data/p=3", "data/q=5").q == 5


@pytest.mark.parametrize("text", ["training/steps", "=3", "training..steps=3", "training/ste ps=3"])
def test_malformed_override(text):
    assert "expected the form key=value" in error(hydrate, TrainConfig, text)
    assert "key=value" in error(parse_override, text)


def test_yaml_file_errors(tmp_path):
    assert "missing.yaml" in error(hydrate, TrainConfig, str(tmp_path / "missing.yaml"))
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    assert "list.yaml" in error(hydrate, TrainConfig, listing) and "mapping" in error(hydrate, TrainConfig, listing)
    broken = tmp_path / "broken.yml"
    broken.write_text("training: [1,\n")
    assert "broken.yml" in error(hydrate, TrainConfig, broken)
    assert "unsupported config source" in error(hydrate, TrainConfig, 3)


def test_config_error_is_a_usage_error():
    with pytest.raises(UsageError):
        hydrate(TrainConfig, "nope=1")


# C4: YAML


def test_to_yaml_shows_help_types_and_required():
    text = to_yaml(NeedsP)
    assert "# modulus [int, required]\n  p: ???" in text
    assert "training:\n  # [int]\n  seed: 0" in text
    assert "#" not in to_yaml(NeedsP, comments=False)


@pytest.mark.parametrize("comments", [True, False])
def test_round_trip_defaults_and_changed_values(tmp_path, comments):
    file = tmp_path / "run.yaml"
    for cfg in [
        hydrate(Everything),
        hydrate(Everything, "b/name=a b: #c", "c/words=['1', '', 'null']", "c/floats=[1e-30, .inf]", "top=???x"),
        hydrate(GrokAnalysisConfig, "training/seed=9", "optimization/lr=2.5e-7"),
    ]:
        file.write_text(to_yaml(cfg, comments=comments))
        assert hydrate(type(cfg), file) == cfg
    assert "default 'run'" not in to_yaml(hydrate(Everything, "b/name=other"))
    assert "[str, default run]" in to_yaml(hydrate(Everything, "b/name=other"))


def test_to_dict_is_plain_json():
    cfg = hydrate(Everything)
    assert json.loads(json.dumps(to_dict(cfg))) == to_dict(cfg)
    assert to_dict(cfg)["c"]["words"] == ["x"]
    assert to_dict(NeedsP)["data"]["p"] == "???"


# Property-based: override text and YAML round trips

segment = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
keys = st.lists(st.tuples(segment, st.sampled_from("./")), min_size=1, max_size=4)
tricky = st.text(alphabet="ab\\${}'\": #\n-.01?")  # YAML quoting and OmegaConf interpolation syntax
int64 = st.integers(-2**63, 2**63 - 1)  # an integer field holds 64 bits; wider ones are refused (test_mistakes)
scalars = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(), st.text(), tricky)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=4),
    st.dictionaries(st.text(max_size=5), scalars, max_size=3),
)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 is not 1.0 is not True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(keys, values)
@example([("a", ".")], "${")
@example([("a", ".")], "\\${x}")
@example([("a", ".")], "1e-3")
@example([("a", ".")], ["a: b", "#", "null", "", "2020-01-01"])
@example([("a", ".")], {"x.y": "${a}", "": [1.5, None]})
def test_override_text_round_trips(key_parts, value):
    key = "".join(seg + sep for seg, sep in key_parts)[:-1]
    text = format_override(key, value)
    path, parsed = parse_override(text)
    assert path == key.replace(".", "/")
    assert same(parsed, value), text


strings = (st.text() | tricky).filter(lambda s: s != "???")
typed = {
    "a/count": int64,
    "a/rate": st.floats(allow_nan=False),
    "a/flag": st.booleans(),
    "b/name": strings,
    "b/maybe": st.none() | int64,
    "b/mode": st.sampled_from(["fast", "slow"]),
    "c/sizes": st.lists(int64, max_size=3),
    "c/words": st.lists(strings, max_size=3).map(tuple),
    "c/floats": st.lists(st.floats(allow_nan=False), max_size=3),
    "c/extra": st.dictionaries(st.from_regex(r"[a-z]{1,4}", fullmatch=True), scalars.filter(lambda v: v != "???")),
    "top": strings,
}


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries(typed), st.sampled_from(["override", "yaml", "dict"]))
def test_every_type_round_trips_through_hydrate(tmp_path_factory, chosen, via):
    if via == "override":
        cfg = hydrate(Everything, *(format_override(path, v) for path, v in chosen.items()))
    elif via == "dict":
        cfg = hydrate(Everything, {path.split("/")[0]: {} for path in chosen} | _nested(chosen))
    else:
        file = tmp_path_factory.mktemp("cfg") / "run.yaml"
        file.write_text(to_yaml(hydrate(Everything, *(format_override(p, v) for p, v in chosen.items()))))
        cfg = hydrate(Everything, file)
    for path, expected in chosen.items():
        got = getattr(cfg, schema(Everything).by_path[path].attr)
        if path in ("a/rate", "c/floats"):  # ints are accepted for floats; compare as floats
            expected = [float(x) for x in expected] if isinstance(expected, list) else float(expected)
        assert same(got, expected) or (isinstance(got, float) and math.isclose(got, expected)), path


_nested = nest_paths


def test_dataclass_field_is_plain_dataclasses_field():
    f = field("a/b", default=1, help="h")
    assert isinstance(f, dataclasses.Field) and f.metadata["lenscope"] == {"path": "a/b", "help": "h"}


def test_unresolvable_annotation_names_the_field():
    @dataclass
    class Forward:
        ok: int = field("a/ok", default=1)
        bad: Undefined = field("a/bad", default=1)  # type: ignore[name-defined]  # noqa: F821

    message = error(schema, Forward)
    assert "Forward.bad" in message and "Undefined" in message


def test_string_defaults_stay_literal_and_messages_stay_one_line():
    @dataclass
    class Template:
        fmt: str = field("log/fmt", default="${step}: {loss}", help="line format")
        req: int = field("log/req", help="needed\nsecond help line")

    assert hydrate(Template, "log/req=1").fmt == "${step}: {loss}"
    assert "log/req (needed)" in error(hydrate, Template)


def test_refining_subclass_changes_default_and_inherits_help():
    from dataclasses import dataclass

    from lenscope.config import field, hydrate, schema

    @dataclass
    class Parent:
        steps: int = field("training/steps", default=10, help="total steps")

    @dataclass
    class Child(Parent):
        steps: int = field("training/steps", default=99)

    spec = schema(Child).by_path["training/steps"]
    assert spec.default == 99 and spec.help == "total steps"
    assert hydrate(Child).steps == 99 and hydrate(Parent).steps == 10


# ---- ranges, strict booleans, refused YAML -----------------------------------------

@dataclass
class Ranged:
    steps: int = field("training/steps", default=10, ge=0, help="steps")
    seed: int = field("training/seed", default=0, ge=0, lt=2**32, help="seed")
    rate: float = field("model/rate", default=0.5, gt=0, le=1, help="rate")
    widths: list[int] = field("model/widths", default=[4, 8], ge=1, help="widths")
    flag: bool = field("run/flag", default=False, help="a switch")
    flags: list[bool] = field("run/flags", default=[True], help="switches")
    maybe: bool | None = field("run/maybe", default=None, help="three states")


@pytest.mark.parametrize("source, message", [
    ("training/steps=-5", "training/steps must be >= 0, got -5 (from override training/steps=-5)"),
    ("training/seed=4294967296", "training/seed must be >= 0 and < 4294967296 (2**32), got 4294967296"),
    ("training/seed=1e20", "training/seed: expected int >= 0 and < 4294967296 (2**32), got 1e+20"),
    ("model/rate=0", "model/rate must be > 0 and <= 1, got 0"),
    ("model/rate=1.5", "model/rate must be > 0 and <= 1, got 1.5"),
    ("model/widths=[4, 0]", "model/widths must be >= 1, got 0"),
    ("run/flag=yes", "run/flag: expected bool, got 'yes' (write true or false; yes/no/on/off are text)"),
    ("run/flag=ON", "run/flag: expected bool, got 'ON' (write true or false; yes/no/on/off are text)"),
    ("run/flag=1", "run/flag: expected bool, got 1 (write true or false)"),
    ("run/flags=[true, no]", "run/flags: expected bool, got 'no'"),
    ("run/maybe=off", "run/maybe: expected bool, got 'off'"),
])
def test_ranges_and_booleans_refuse_nonsense_naming_the_source(source, message):
    assert message in error(hydrate, Ranged, source)


def test_values_in_range_and_real_booleans_pass():
    args = hydrate(Ranged, "training/steps=0", "training/seed=4294967295", "model/rate=1", "run/flag=true",
                   "run/flags=[false, true]", "run/maybe=null")
    assert (args.steps, args.seed, args.rate, args.flag, args.flags, args.maybe) == (0, 2**32 - 1, 1, True,
                                                                                     [False, True], None)
    assert hydrate(Ranged, {"run": {"flag": False}}).flag is False
    assert "# steps [int >= 0]" in to_yaml(Ranged) and "[float > 0 and <= 1]" in to_yaml(Ranged)


def test_range_declarations_are_checked_and_kept_by_a_new_default():
    with pytest.raises(ConfigError, match="default must be >= 0, got -1"):
        schema(dataclasses.make_dataclass("BadDefault", [("n", int, field("a/n", default=-1, ge=0))]))
    with pytest.raises(ConfigError, match="a range .* needs an int or float field"):
        schema(dataclasses.make_dataclass("OnText", [("s", str, field("a/s", default="x", ge=0))]))
    with pytest.raises(ConfigError, match="ge= must be a number"):
        field("a/n", default=1, ge="0")

    @dataclass
    class Longer(Ranged):
        steps: int = field("training/steps", default=1000)  # a new default keeps the range

    assert schema(Longer).by_path["training/steps"].range == Ranged.__dataclass_fields__["steps"].metadata[
        "lenscope"]["range"]
    assert "training/steps must be >= 0" in error(hydrate, Longer, "training/steps=-1")


def test_a_config_built_by_hand_is_range_checked_too():
    for bad, message in [({"steps": -5}, "training/steps must be >= 0, got -5"),
                         ({"batch_size": -3}, "training/batch_size must be >= 0, got -3"),
                         ({"report_interval": -1}, "logging/report_interval must be >= 0, got -1"),
                         ({"seed": 2**40}, "training/seed must be >= 0 and < 4294967296")]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            TrainerConfig(**bad)
    assert TrainerConfig(steps=0, batch_size=0, report_interval=0).steps == 0


def test_duplicate_keys_and_aliases_in_config_files_are_refused(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("run:\n  flag: true\ntraining:\n  steps: 3\n  steps: 4\n")
    assert error(hydrate, Ranged, twice) == (
        f"config file {str(twice)!r}: duplicate key 'steps' at line 5, column 3 (first at line 4; "
        "a key may appear once in a mapping)")
    aliased = tmp_path / "aliased.yaml"
    aliased.write_text("model:\n  widths: &w [4, 4]\nother: *w\n")
    assert "YAML alias *w refused at line 3" in error(hydrate, Ranged, aliased)
    assert error(hydrate, Ranged, "model/widths=[&w 4, *w]").startswith(
        "model/widths: value '[&w 4, *w]': YAML alias *w refused")

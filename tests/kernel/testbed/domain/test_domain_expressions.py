"""CEL expressions in domain assets: compile errors name the asset path, a missing key is a
`MissingValue`, and results come back as plain Python with sorted keys, the same every time."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simreport.kernel.testbed.domain.expressions import Expression, ExpressionError, MissingValue

ALLOWED = frozenset({"args", "state", "items", "now"})
PATH = "tools.2.preconditions.0.require"


def refusal(source: str, allowed: frozenset[str] = ALLOWED) -> ExpressionError:
    with pytest.raises(ExpressionError) as caught:
        Expression.compile(source, PATH, allowed)
    return caught.value


def test_a_syntax_error_names_the_asset_path() -> None:
    error = refusal("args.id in")
    assert (error.kind, error.path) == ("expression_invalid", PATH)


def test_an_unknown_variable_names_the_asset_path_and_the_variable() -> None:
    error = refusal("calls.size() > 0 && args.id == 'a'")
    assert (error.kind, error.path) == ("expression_invalid", PATH)
    assert "calls" in error.message


@pytest.mark.parametrize(
    "source",
    [
        "state.booking.map(k, k)",
        "state.booking.filter(k, true)",
        'state["booking"].map(k, k)',
        "state.map(kind, kind)",
        "initial.booking . map(k, k)",
        "args.map(k, k)",
    ],
)
def test_a_list_built_by_iterating_a_map_is_refused(source: str) -> None:
    allowed = ALLOWED | {"initial"}
    error = refusal(source, allowed)
    assert (error.kind, error.path) == ("expression_invalid", PATH)


@pytest.mark.parametrize(
    "source",
    [
        "items.booking.exists(x, x.id == args.id)",
        "items.booking.map(b, b.id)",
        "items.booking.filter(b, b.paid > 0).size() > 0",
        "state.booking.all(k, state.booking[k].paid >= 0)",
        "args.ids.map(i, i + 1)",
    ],
)
def test_names_bound_by_a_macro_and_iteration_in_key_order_are_allowed(source: str) -> None:
    expression = Expression.compile(source, PATH, ALLOWED)
    assert expression.variables <= ALLOWED
    assert "x" not in expression.variables and "b" not in expression.variables


def test_a_missing_key_is_a_missing_value_at_the_expressions_path() -> None:
    expression = Expression.compile("state.booking[args.id].status", PATH, ALLOWED)
    with pytest.raises(MissingValue) as caught:
        expression.evaluate({"args": {"id": "ZZ"}, "state": {"booking": {}}})
    assert (caught.value.kind, caught.value.path) == ("missing_value", PATH)


def test_an_absent_argument_is_a_missing_value() -> None:
    expression = Expression.compile("args.id", PATH, ALLOWED)
    with pytest.raises(MissingValue):
        expression.evaluate({"args": {}})


@pytest.mark.parametrize("source", ["1 / args.n", "args.n % 0", "args.n + 'a'", "int('x')"])
def test_a_failing_evaluation_is_an_expression_error_not_a_crash(source: str) -> None:
    expression = Expression.compile(source, PATH, ALLOWED)
    with pytest.raises(ExpressionError) as caught:
        expression.evaluate({"args": {"n": 0}})
    assert (caught.value.kind, caught.value.path) == ("expression_failed", PATH)


def test_a_condition_that_is_not_boolean_is_refused() -> None:
    expression = Expression.compile("args.n", PATH, ALLOWED)
    assert Expression.compile("args.n > 0", PATH, ALLOWED).truth({"args": {"n": 1}}) is True
    with pytest.raises(ExpressionError) as caught:
        expression.truth({"args": {"n": 1}})
    assert caught.value.path == PATH


def test_results_are_plain_python() -> None:
    expression = Expression.compile(
        '{"at": timestamp("2026-05-04T08:00:00Z"), "wait": duration("90s"), '
        '"raw": b"ok", "list": [1, 2.5, true, null]}',
        PATH,
        ALLOWED,
    )
    value = expression.evaluate({})
    assert value == {
        "at": "2026-05-04T08:00:00+00:00",
        "list": [1, 2.5, True, None],
        "raw": "ok",
        "wait": "90s",
    }
    json.dumps(value)  # nothing CEL-specific is left


def test_a_map_result_has_sorted_keys_on_every_evaluation() -> None:
    expression = Expression.compile(
        '{"z": args.n, "a": {"y": 1, "b": 2}, "m": items.booking.map(b, {b.id: b.paid})}',
        PATH,
        ALLOWED,
    )
    variables = {
        "args": {"n": 3},
        "items": {"booking": [{"id": f"K{i:02d}", "paid": i} for i in range(12)]},
    }
    dumps = {json.dumps(expression.evaluate(variables)) for _ in range(40)}
    assert len(dumps) == 1
    value = expression.evaluate(variables)
    assert list(value) == ["a", "m", "z"]
    assert list(value["a"]) == ["b", "y"]


def test_a_map_read_from_the_state_comes_back_sorted() -> None:
    expression = Expression.compile("state.booking", PATH, ALLOWED)
    booking = {f"K{i:02d}": {"paid": i, "id": f"K{i:02d}"} for i in reversed(range(15))}
    dumps = {json.dumps(expression.evaluate({"state": {"booking": booking}})) for _ in range(40)}
    assert len(dumps) == 1
    assert list(json.loads(dumps.pop())) == sorted(booking)


@given(
    st.dictionaries(
        st.text(alphabet="abcdefghij", min_size=1, max_size=4),
        st.integers(min_value=-1000, max_value=1000),
        max_size=10,
    )
)
def test_a_map_result_does_not_depend_on_the_inputs_key_order(values: dict[str, Any]) -> None:
    expression = Expression.compile("args.m", PATH, ALLOWED)
    reversed_order = dict(reversed(list(values.items())))
    first = json.dumps(expression.evaluate({"args": {"m": values}}))
    second = json.dumps(expression.evaluate({"args": {"m": reversed_order}}))
    assert first == second == json.dumps(values, sort_keys=True)


def test_the_expression_library_loads_only_when_an_expression_is_compiled() -> None:
    """The `cel` package brings its command line (rich, prompt_toolkit, typer) with it: a run of
    another world, and every command line, must not pay for it."""
    code = (
        "import sys, simreport.cli, simreport.kernel.engine\n"
        "simreport.cli.build_parser()\n"
        "assert 'cel' not in sys.modules\n"
        "from simreport.kernel.testbed.domain.expressions import Expression\n"
        "assert 'cel' not in sys.modules\n"
        "Expression.compile('1 + 1', 'x', frozenset())\n"
        "assert 'cel' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

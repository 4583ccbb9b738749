"""The public surface of airlane.rules is deliberate (STYLE.md section 6): every module's
``__all__`` names exist and are documented, and the package exports exactly these."""

from __future__ import annotations

import importlib
import inspect

import pytest

import airlane.rules

MODULES = [
    "aggregates",
    "engine",
    "errors",
    "expressions",
    "functions",
    "plan",
    "syntax",
    "values",
    "windows",
]


def test_package_exports():
    assert sorted(airlane.rules.__all__) == sorted(
        [
            "DEFAULT_MAX_GROUPS",
            "DEFAULT_MAX_WINDOW_ROWS",
            "MAX_GROUP_KEYS",
            "MAX_PROJECTIONS",
            "MAX_SQL_CHARS",
            "WINDOW_END",
            "WINDOW_START",
            "CompiledExpression",
            "Projection",
            "Row",
            "RuleError",
            "RulePlan",
            "RuleRunner",
            "RuleStats",
            "SnapshotError",
            "Source",
            "SourceKind",
            "WindowKind",
            "WindowSpec",
            "compile_expression",
            "compile_rule",
        ]
    )


@pytest.mark.parametrize("name", MODULES)
def test_every_module_documents_what_it_exports(name):
    module = importlib.import_module(f"airlane.rules.{name}")
    assert module.__doc__
    for attr in module.__all__:
        value = getattr(module, attr)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"airlane.rules.{name}.{attr} has no docstring"
        if inspect.isclass(value):
            for member, item in vars(value).items():
                if not member.startswith("_") and inspect.isfunction(item):
                    assert item.__doc__, f"{attr}.{member} has no docstring"

"""Real outputs against their JSON Schemas (``docs/schemas/``): what every test that reads an
output's JSON calls, so each schema is checked on what the commands really print.

Two checks: the output validates (types, required keys, the ``schema`` name), and every key
it carries is documented in its schema's ``properties``: the schemas are open (a consumer's
validator keeps passing when a key is added), so this is what makes adding a key to an output
also mean adding it to the schema.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from fdprof import contracts

FOLDER = Path(__file__).resolve().parents[1] / "docs" / "schemas"


@functools.cache
def registry() -> Registry:
    resources = [
        (path.name, Resource.from_contents(json.loads(path.read_text()), DRAFT202012))
        for path in sorted(FOLDER.glob("*.schema.json"))
    ]
    return Registry().with_resources(resources)


def validate(output: str, data: dict[str, Any]) -> None:
    """Assert ``data`` is a valid ``output`` (``hazards``, ``ab``, ``error`` ...) of this
    version, and that every key of it is documented."""
    name = f"{output}.schema.json"
    schema = registry()[name].contents
    Draft202012Validator(schema, registry=registry()).validate(data)
    assert data["schema"] == contracts.schema(output)
    missing = undocumented(data, schema, registry().resolver(name))
    assert not missing, (
        f"keys of {output} not in docs/schemas/{name} (add them as optional properties: "
        f"docs/schemas/README.md): {missing[:10]}"
    )


def undocumented(data: Any, schema: dict, resolver, path: str = "") -> list[str]:
    """Paths of keys in ``data`` that no ``properties`` of its schema names (objects whose
    schema lists no properties, like a free-form ``settings``, take anything)."""
    schema, resolver = _resolved(schema, resolver)
    if isinstance(data, dict):
        props = {k: (v, resolver) for k, v in schema.get("properties", {}).items()}
        for part in schema.get("allOf", []):
            part, at = _resolved(part, resolver)
            props.update({k: (v, at) for k, v in part.get("properties", {}).items()})
        extra = schema.get("additionalProperties")
        out = []
        for key, value in data.items():
            if key in props:
                out += undocumented(value, props[key][0], props[key][1], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += undocumented(value, extra, resolver, f"{path}.{key}")
            elif props:
                out.append(f"{path}.{key}")
        return out
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [p for item in data[:100] for p in undocumented(item, schema["items"], resolver,
                                                               f"{path}[]")]  # fmt: skip
    return []


def _resolved(schema: dict, resolver):
    while "$ref" in schema:
        found = resolver.lookup(schema["$ref"])
        schema, resolver = found.contents, found.resolver
    return schema, resolver

"""The model base shared by every CRD package: typed dataclasses that round-trip with the JSON the
API server stores, validate what they read with errors that name the field, and describe
themselves as structural OpenAPI v3 schemas (from which ``make manifests`` writes config/crd).

Owns: ``field`` (a dataclass field with its JSON name, schema hints and omit-empty rule),
``Model`` (to_dict / from_dict / openapi_schema), ``Resource`` (a top-level kind with its CRD
facts and ObjectMeta), ``ValidationError``. Imports nothing internal.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING
from typing import Any, ClassVar, Self, TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = [
    "Model",
    "NamedByMetadata",
    "PrinterColumn",
    "Resource",
    "ValidationError",
    "field",
    "json_name_of",
]

T = TypeVar("T")


class ValidationError(ValueError):
    """A value read from the API server does not fit the model; ``path`` names the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def field(
    *,
    json: str | None = None,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    description: str = "",
    omit_empty: bool = True,
    schema: Mapping[str, Any] | None = None,
) -> Any:
    """A model field. ``json`` overrides the camelCase wire name (``resourceID``); ``schema``
    adds OpenAPI keywords (minimum, pattern, enum, x-kubernetes-* ...)."""
    metadata = {"json": json, "description": description, "omit_empty": omit_empty, "schema": schema}
    if default is not MISSING:
        return dataclasses.field(default=default, metadata=metadata)
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(metadata=metadata)


def json_name_of(model_field: dataclasses.Field[Any]) -> str:
    return model_field.metadata.get("json") or _camel(model_field.name)


def _is_empty(value: Any) -> bool:
    """Go's omitempty: None, "", 0, False, and empty arrays and objects (after encoding)."""
    return value is None or value is False or (not isinstance(value, bool) and not value)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _optional_inner(annotation: Any) -> Any | None:
    """X for ``X | None``; None when the annotation is not optional."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(get_args(annotation)) == 2:
            return args[0]
    return None


def _is_int_or_string(annotation: Any) -> bool:
    """Whether the annotation is ``int | str`` (Kubernetes' IntOrString)."""
    return get_origin(annotation) in (Union, types.UnionType) and set(get_args(annotation)) == {int, str}


def _decode(annotation: Any, value: Any, path: str) -> Any:
    if _is_int_or_string(annotation):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValidationError(path, f"expected an integer or a string, got {_type_name(value)}")
        return value
    inner = _optional_inner(annotation)
    if inner is not None:
        return None if value is None else _decode(inner, value, path)
    origin = get_origin(annotation)
    if annotation is Any:
        return value
    if origin is typing.Literal:
        if value not in get_args(annotation):
            allowed = ", ".join(repr(a) for a in get_args(annotation))
            raise ValidationError(path, f"must be one of {allowed}, got {value!r}")
        return value
    if isinstance(annotation, type) and issubclass(annotation, Model):
        if not isinstance(value, dict):
            raise ValidationError(path, f"expected an object, got {_type_name(value)}")
        return annotation.from_dict(value, path=path)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in annotation)
            raise ValidationError(path, f"must be one of {allowed}, got {value!r}") from None
    if origin is list:
        if not isinstance(value, list):
            raise ValidationError(path, f"expected an array, got {_type_name(value)}")
        (item_type,) = get_args(annotation)
        return [_decode(item_type, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ValidationError(path, f"expected an object, got {_type_name(value)}")
        _, value_type = get_args(annotation)
        return {str(k): _decode(value_type, v, f"{path}.{k}") for k, v in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValidationError(path, f"expected a boolean, got {_type_name(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(path, f"expected an integer, got {_type_name(value)}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError(path, f"expected a number, got {_type_name(value)}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ValidationError(path, f"expected a string, got {_type_name(value)}")
        return value
    raise TypeError(f"{path}: unsupported model annotation {annotation!r}")


def _encode(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _schema(annotation: Any) -> dict[str, Any]:
    if _is_int_or_string(annotation):
        return {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    inner = _optional_inner(annotation)
    if inner is not None:
        return _schema(inner)
    origin = get_origin(annotation)
    if annotation is Any:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if origin is typing.Literal:
        values = list(get_args(annotation))
        return {"type": _scalar_type(type(values[0])), "enum": values}
    if isinstance(annotation, type) and issubclass(annotation, Model):
        return annotation.openapi_schema()
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
        return {"type": _scalar_type(type(values[0])), "enum": values}
    if origin is list:
        return {"type": "array", "items": _schema(get_args(annotation)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(get_args(annotation)[1])}
    return {"type": _scalar_type(annotation)}


def _scalar_type(python_type: Any) -> str:
    types_by_python = {str: "string", int: "integer", bool: "boolean", float: "number"}
    if python_type not in types_by_python:
        raise TypeError(f"unsupported schema type {python_type!r}")
    return types_by_python[python_type]


@dataclasses.dataclass(kw_only=True)
class Model:
    """Base of every spec, status and nested type: a dataclass that speaks the wire format."""

    @classmethod
    def _hints(cls) -> dict[str, Any]:
        cached: dict[str, Any] | None = cls.__dict__.get("_nodewright_hints")
        if cached is None:
            cached = get_type_hints(cls)
            type.__setattr__(cls, "_nodewright_hints", cached)
        return cached

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "") -> Self:
        """Read a wire object; unknown keys are ignored, wrong types raise ValidationError."""
        hints = cls._hints()
        values: dict[str, Any] = {}
        for model_field in dataclasses.fields(cls):
            if not model_field.init:
                continue
            key = json_name_of(model_field)
            field_path = f"{path}.{key}" if path else key
            if key in data and data[key] is not None:
                values[model_field.name] = _decode(hints[model_field.name], data[key], field_path)
            elif model_field.default is MISSING and model_field.default_factory is MISSING:
                if _optional_inner(hints[model_field.name]) is not None:
                    values[model_field.name] = None
                else:
                    raise ValidationError(field_path, "is required")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The wire object; omit_empty fields (the default) are left out when zero or empty."""
        result: dict[str, Any] = {}
        for model_field in dataclasses.fields(self):
            value = _encode(getattr(self, model_field.name))
            if model_field.metadata.get("omit_empty", True) and _is_empty(value):
                continue
            result[json_name_of(model_field)] = value
        return result

    @classmethod
    def openapi_schema(cls) -> dict[str, Any]:
        """The structural OpenAPI v3 schema of this model."""
        hints = cls._hints()
        properties: dict[str, Any] = {}
        required: list[str] = []
        for model_field in dataclasses.fields(cls):
            key = json_name_of(model_field)
            schema = _schema(hints[model_field.name])
            if model_field.metadata.get("description"):
                schema = {"description": model_field.metadata["description"], **schema}
            schema.update(model_field.metadata.get("schema") or {})
            properties[key] = schema
            no_default = model_field.default is MISSING and model_field.default_factory is MISSING
            if no_default and _optional_inner(hints[model_field.name]) is None:
                required.append(key)
        schema_out: dict[str, Any] = {"type": "object", "properties": properties}
        if cls.__doc__ and cls.__doc__ != Model.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
            schema_out = {"description": " ".join(cls.__doc__.split()), **schema_out}
        if required:
            schema_out["required"] = required
        return schema_out


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""


class NamedByMetadata:
    """``name`` and ``namespace`` of a model whose ``metadata`` is the API server's own dict
    (a top-level ``Resource``, or an object embedded whole in another)."""

    metadata: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))


@dataclasses.dataclass(kw_only=True)
class Resource(Model, NamedByMetadata):
    """A top-level kind: ``metadata`` stays the API server's own dict; subclasses add ``spec`` and
    ``status`` and declare their CRD facts as class variables."""

    API_VERSION: ClassVar[str]
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str] = ""
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    CATEGORIES: ClassVar[tuple[str, ...]] = ()
    NAMESPACED: ClassVar[bool] = True
    STATUS_SUBRESOURCE: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = ()
    STORAGE: ClassVar[bool] = True

    metadata: dict[str, Any] = field(default_factory=dict, omit_empty=False)

    @classmethod
    def group(cls) -> str:
        return cls.API_VERSION.rpartition("/")[0]

    @classmethod
    def version(cls) -> str:
        return cls.API_VERSION.rpartition("/")[2]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        """Read a whole object as returned by the API server (apiVersion and kind checked)."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if (api_version, kind) != (cls.API_VERSION, cls.KIND):
            raise ValidationError("", f"expected {cls.KIND} {cls.API_VERSION}, got {kind} {api_version}")
        return cls.from_dict({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})

    def to_object(self) -> dict[str, Any]:
        """The whole object with apiVersion and kind, ready to send to the API server."""
        return {"apiVersion": self.API_VERSION, "kind": self.KIND, **self.to_dict()}

    @classmethod
    def openapi_schema(cls) -> dict[str, Any]:
        schema = super().openapi_schema()
        schema["properties"].update(
            apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"}
        )
        # Only spec may be required at the top: metadata is the API server's, status is ours.
        required = [key for key in schema.pop("required", []) if key == "spec"]
        if required:
            schema["required"] = required
        return schema

    @classmethod
    def custom_resource_definition(cls) -> dict[str, Any]:
        """This kind's CustomResourceDefinition (one version), as ``make manifests`` writes it."""
        names: dict[str, Any] = {
            "kind": cls.KIND,
            "listKind": f"{cls.KIND}List",
            "plural": cls.PLURAL,
            "singular": cls.SINGULAR or cls.KIND.lower(),
        }
        if cls.SHORT_NAMES:
            names["shortNames"] = list(cls.SHORT_NAMES)
        if cls.CATEGORIES:
            names["categories"] = list(cls.CATEGORIES)
        version: dict[str, Any] = {
            "name": cls.version(),
            "served": True,
            "storage": cls.STORAGE,
            "schema": {"openAPIV3Schema": cls.openapi_schema()},
        }
        if cls.STATUS_SUBRESOURCE:
            version["subresources"] = {"status": {}}
        if cls.PRINTER_COLUMNS:
            version["additionalPrinterColumns"] = [
                {
                    "name": c.name,
                    "type": c.type,
                    "jsonPath": c.json_path,
                    **({"priority": c.priority} if c.priority else {}),
                    **({"description": c.description} if c.description else {}),
                }
                for c in cls.PRINTER_COLUMNS
            ]
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{cls.PLURAL}.{cls.group()}"},
            "spec": {
                "group": cls.group(),
                "names": names,
                "scope": "Namespaced" if cls.NAMESPACED else "Cluster",
                "versions": [version],
            },
        }

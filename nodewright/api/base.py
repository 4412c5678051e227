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
from collections.abc import Callable, Mapping
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


_Decoder = Callable[[Any, str], Any]
"""Reads one wire value at ``path`` (used only in errors) into its Python value."""

_DECODERS: dict[Any, _Decoder] = {}


def _decoder(annotation: Any) -> _Decoder:
    """The decoder of an annotation, built once: the type tests run when a model's field is
    first read, not on every value (reading is the hot path of every reconcile pass)."""
    try:
        return _DECODERS[annotation]
    except KeyError:
        decoder = _DECODERS[annotation] = _build_decoder(annotation)
        return decoder
    except TypeError:  # an unhashable annotation: build it each time
        return _build_decoder(annotation)


def _checked(kind: type | tuple[type, ...], expected: str) -> _Decoder:
    """A decoder that passes a value of ``kind`` (never a bool unless ``kind`` is bool)."""
    allow_bool = kind is bool

    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, kind) or (isinstance(value, bool) and not allow_bool):
            raise ValidationError(path, f"expected {expected}, got {_type_name(value)}")
        return value

    return decode


def _build_decoder(annotation: Any) -> _Decoder:
    if _is_int_or_string(annotation):
        return _checked((int, str), "an integer or a string")
    inner = _optional_inner(annotation)
    if inner is not None:
        decode_inner = _decoder(inner)
        return lambda value, path: None if value is None else decode_inner(value, path)
    if annotation is Any:
        return lambda value, _path: value
    if get_origin(annotation) is typing.Literal:
        return _literal_decoder(get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Model):
        return _model_decoder(annotation)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_decoder(annotation)
    if get_origin(annotation) in (list, dict):
        return _container_decoder(annotation)
    if annotation is float:
        check_number = _checked((int, float), "a number")
        return lambda value, path: float(check_number(value, path))
    scalars = {bool: "a boolean", int: "an integer", str: "a string"}
    if annotation in scalars:
        return _checked(annotation, scalars[annotation])

    def unsupported(_value: Any, path: str) -> Any:
        raise TypeError(f"{path}: unsupported model annotation {annotation!r}")

    return unsupported


def _literal_decoder(allowed_values: tuple[Any, ...]) -> _Decoder:
    def decode(value: Any, path: str) -> Any:
        if value not in allowed_values:
            allowed = ", ".join(repr(a) for a in allowed_values)
            raise ValidationError(path, f"must be one of {allowed}, got {value!r}")
        return value

    return decode


def _model_decoder(model: type[Model]) -> _Decoder:
    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise ValidationError(path, f"expected an object, got {_type_name(value)}")
        return model.from_dict(value, path=path)

    return decode


def _enum_decoder(kind: type[enum.Enum]) -> _Decoder:
    def decode(value: Any, path: str) -> Any:
        try:
            return kind(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in kind)
            raise ValidationError(path, f"must be one of {allowed}, got {value!r}") from None

    return decode


def _container_decoder(annotation: Any) -> _Decoder:
    """``list[X]`` and ``dict[str, X]``: the item decoder is built once."""
    if get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        decode_item = _decoder(item_type)

        def decode_list(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise ValidationError(path, f"expected an array, got {_type_name(value)}")
            return [decode_item(item, f"{path}[{i}]") for i, item in enumerate(value)]

        return decode_list
    _, value_type = get_args(annotation)
    if value_type is Any:  # kept as read (a copy): no per-key path to build for errors that cannot occur

        def copy_dict(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise ValidationError(path, f"expected an object, got {_type_name(value)}")
            return dict(value)

        return copy_dict
    decode_value = _decoder(value_type)

    def decode_dict(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise ValidationError(path, f"expected an object, got {_type_name(value)}")
        return {str(k): decode_value(v, f"{path}.{k}") for k, v in value.items()}

    return decode_dict


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


_DEFAULTED, _NONE, _REQUIRED = "defaulted", "none", "required"
"""What ``from_dict`` does with an absent field: leave it to its default, set None, or refuse."""


class _FieldPlan(typing.NamedTuple):
    name: str
    key: str
    decode: _Decoder
    absent: str


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
    def _reading_plan(cls) -> tuple[_FieldPlan, ...]:
        """Each init field's name, JSON key, decoder and rule when absent; built once per class."""
        cached: tuple[_FieldPlan, ...] | None = cls.__dict__.get("_nodewright_plan")
        if cached is None:
            hints = cls._hints()
            plan = []
            for model_field in dataclasses.fields(cls):
                if not model_field.init:
                    continue
                annotation = hints[model_field.name]
                if model_field.default is not MISSING or model_field.default_factory is not MISSING:
                    absent = _DEFAULTED
                else:
                    absent = _NONE if _optional_inner(annotation) is not None else _REQUIRED
                plan.append(
                    _FieldPlan(model_field.name, json_name_of(model_field), _decoder(annotation), absent)
                )
            cached = tuple(plan)
            type.__setattr__(cls, "_nodewright_plan", cached)
        return cached

    @classmethod
    def _writing_plan(cls) -> tuple[tuple[str, str, bool], ...]:
        """Each field's name, JSON key and omit-empty rule; built once per class."""
        cached: tuple[tuple[str, str, bool], ...] | None = cls.__dict__.get("_nodewright_write_plan")
        if cached is None:
            cached = tuple(
                (f.name, json_name_of(f), bool(f.metadata.get("omit_empty", True)))
                for f in dataclasses.fields(cls)
            )
            type.__setattr__(cls, "_nodewright_write_plan", cached)
        return cached

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "") -> Self:
        """Read a wire object; unknown keys are ignored, wrong types raise ValidationError."""
        values: dict[str, Any] = {}
        for name, key, decode, absent in cls._reading_plan():
            value = data.get(key)
            if value is not None:
                values[name] = decode(value, f"{path}.{key}" if path else key)
            elif absent is _NONE:
                values[name] = None
            elif absent is _REQUIRED:
                raise ValidationError(f"{path}.{key}" if path else key, "is required")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The wire object; omit_empty fields (the default) are left out when zero or empty."""
        result: dict[str, Any] = {}
        for name, key, omit_empty in self._writing_plan():
            value = _encode(getattr(self, name))
            if omit_empty and _is_empty(value):
                continue
            result[key] = value
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

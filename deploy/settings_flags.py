"""The flags of the component commands (`vendue bbs|auctioneer|rep`), made from their settings models
(bbs/settings.py, auctioneer/settings.py, rep/settings.py): one flag per setting, named after it
(`presence_ttl` -> `--presence-ttl`), of its type, with its description as help and its default shown.

A flag that is not given passes nothing, so the setting's `VENDUE_*` environment variable (read by
pydantic-settings), else its default, decides: `--insecure` absent is not `insecure=False`, which would
override VENDUE_INSECURE=1.

A setting's Field may say, in `json_schema_extra`:
- `"flag": "--stack"`: the flag's name, where it is not the setting's (`stacks`, repeatable: `--stack`);
- `"flag": None`: no flag at all (secrets: a command line is visible to every local user, `ps`);
- `"hidden": True`: a flag left out of the help (tests' own knobs).

The settings that mixins from outside the settings modules add (common/tls.py TLSOptions,
common/limits.py RequestLimitOptions, bbs/quotas.py QuotaOptions) have their help in MIXIN_HELP below, and
each mixin's flags are a panel of the help of their own (MIXIN_PANELS); a command may put more of its flags
in panels (`panels=`). Each flag's help ends with its default; its environment variable is named after it
(`--presence-ttl`: VENDUE_PRESENCE_TTL, ENV_NOTE), and named only where it is not (`--stack`: VENDUE_STACKS).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import typer
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

ENV_PREFIX = "VENDUE_"
ENV_NOTE = ("Every flag may be set in the environment instead: VENDUE_ and its name in capitals, dashes as "
            "underscores (--presence-ttl: VENDUE_PRESENCE_TTL); a flag given wins.")
# The help panel of the settings each mixin adds.
MIXIN_PANELS = {"TLSOptions": "TLS", "RequestLimitOptions": "Serving limits", "QuotaOptions": "Quotas"}

# Help of the settings the components' settings inherit from mixins declared elsewhere; `{role}`: the
# component's certificate role.
MIXIN_HELP = {
    "tls_cert": "Its certificate (vendue certs issue --role {role}).",
    "tls_key": "The certificate's private key.",
    "tls_ca": "The cluster CA certificate, ca.pem.",
    "insecure": "Plain HTTP, authorization off, on any address: anyone who reaches it controls it.",
    "max_body_bytes": "Largest request body, bytes; more is 413.",
    "max_bulk_body_bytes": "Largest batch between components, bytes.",
    "request_timeout": "Seconds before an unanswered request is 504.",
    "max_concurrent_requests": "Requests answered at once; more are 503.",
    "max_lrps": "Desired LRPs at most; more is 429.",
    "max_instances": "Desired instances in total at most.",
    "max_event_subscribers": "Open event streams at most.",
    "max_explanations": "Placement explanations kept in memory for `vendue why`, the latest per instance.",
    "callback_allow": "A host task callbacks may name although link-local or a metadata service, "
                      "repeatable (VENDUE_CALLBACK_ALLOW: a JSON list).",
}


@dataclass(frozen=True)
class Flag:
    """One setting's flag."""

    setting: str  # the settings field it sets; also the command's parameter name
    name: str  # "--presence-ttl"
    kind: Any  # the value's type as the command line gives it: str, int, float, Path, bool, list[str]
    default: Any  # the setting's default
    help: str
    hidden: bool = False
    panel: str | None = None  # its panel of the help; None: the command's "Options"

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.setting.upper()

    @property
    def plain(self) -> bool:
        """A flag without a value that only turns its setting on (`--insecure`): absent says nothing."""
        return self.kind is bool and self.default is False

    @property
    def shown_default(self) -> str | None:
        """The default as the help shows it (None: nothing to show, the help says what it means)."""
        return shown(self.default)

    def option(self) -> Any:
        """The typer option: not given, it passes nothing (None), whatever the setting's default."""
        if self.plain:
            names: tuple[str, ...] = (self.name,)  # `--insecure`, never `--no-insecure`
            default: Any = False
        elif self.kind is bool:
            names, default = (f"{self.name}/--no-{self.name.removeprefix('--')}",), None
        else:
            names, default = (self.name,), None
        return typer.Option(default, *names, help=self.help_text(), hidden=self.hidden, show_default=False,
                            rich_help_panel=self.panel)

    def help_text(self) -> str:
        """The description, then the default: `... [default 8889]`, and the environment variable where it is
        not the flag's name (ENV_NOTE): `... [VENDUE_STACKS; default cflinuxfs4]`."""
        said = [] if self.env == env_of(self.name) else [self.env]
        if self.shown_default is not None:
            said.append(f"default {self.shown_default}")
        # Escaped: `[default ...]` would be a style to rich, which typer renders the help with.
        return f"{self.help} \\[{'; '.join(said)}]".lstrip() if said else self.help

    def annotation(self) -> Any:
        if self.plain:
            return bool
        return self.kind | None


def env_of(flag_name: str) -> str:
    """The environment variable ENV_NOTE names after a flag: `--presence-ttl` -> VENDUE_PRESENCE_TTL."""
    return ENV_PREFIX + flag_name.removeprefix("--").replace("-", "_").upper()


def shown(value: Any) -> str | None:
    """A default as the help shows it; None for none worth showing (None, off, empty)."""
    if value is None or value is False or value == [] or value == {}:
        return None
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    return str(value)


def _extra(field: FieldInfo) -> Mapping[str, Any]:
    extra = field.json_schema_extra
    return extra if isinstance(extra, Mapping) else {}


def _kind(annotation: Any) -> Any:
    """The command line's type for a settings field's annotation (its `| None` dropped)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return str  # the settings check the choice, and name the setting when it is wrong
    if origin is list or origin is dict:
        return list[str]  # dict: repeated `k=v`
    if annotation in (str, int, float, bool, Path):
        return annotation
    raise TypeError(f"no flag type for {annotation!r}")


def _declared_by(model: type[BaseModel], setting: str) -> str:
    """The name of the class (the model, or one of its mixins) that declares `setting`."""
    return next(cls.__name__ for cls in model.__mro__ if setting in vars(cls).get("__annotations__", {}))


def settings_flags(model: type[BaseModel], role: str,
                   panels: Mapping[str, Sequence[str]] | None = None) -> list[Flag]:
    """Every flag of `model`'s settings: its own settings in their order, then the mixins'. `panels`: the
    help panel of some settings (panel -> settings); a mixin's are in its MIXIN_PANELS panel."""
    panel_of = {setting: panel for panel, settings in (panels or {}).items() for setting in settings}
    if unknown := sorted(set(panel_of) - set(model.model_fields)):
        raise ValueError(f"{model.__name__} has no setting {', '.join(unknown)} (given a help panel)")
    own = [name for name in vars(model).get("__annotations__", {}) if name in model.model_fields]
    flags = []
    for setting in [*own, *(name for name in model.model_fields if name not in own)]:
        field = model.model_fields[setting]
        extra = _extra(field)
        if "flag" in extra and extra["flag"] is None:
            continue
        if field.annotation is SecretStr or field.annotation == SecretStr | None:
            raise TypeError(f"{model.__name__}.{setting} is a secret: give it `\"flag\": None`")
        default = field.get_default(call_default_factory=True)
        help_text = field.description or MIXIN_HELP.get(setting, "").format(role=role)
        name = str(extra.get("flag") or "--" + setting.replace("_", "-"))
        panel = panel_of.get(setting) or MIXIN_PANELS.get(_declared_by(model, setting))
        flags.append(Flag(setting, name, _kind(field.annotation), default, help_text,
                          bool(extra.get("hidden", False)), panel))
    return flags


def given_settings(flags: Sequence[Flag], values: Mapping[str, Any]) -> dict[str, Any]:
    """The flags given on the command line, as settings (those not given are left out)."""
    given: dict[str, Any] = {}
    for flag in flags:
        value = values[flag.setting]
        if value is None or value == [] or (value is False and flag.plain):
            continue
        if flag.kind == list[str] and isinstance(flag.default, dict):
            value = _pairs(flag.name, value)
        given[flag.setting] = list(value) if isinstance(value, tuple) else value
    return given


def _pairs(name: str, pairs: Sequence[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected k=v, got {pair!r}", param_hint=name)
        found[key] = value
    return found


def with_settings_flags(model: type[BaseModel], role: str, panels: Mapping[str, Sequence[str]] | None = None,
                        ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """`command`, which takes `settings_given: dict[str, Any]`, as typer is to see it: with a flag per setting
    of `model` in that parameter's place (in the help `panels` given, as `settings_flags`), and ENV_NOTE
    after its help; it gets the settings the flags gave (`given_settings`)."""
    flags = settings_flags(model, role, panels)

    def wrap(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        place = signature.parameters["settings_given"]
        options = [inspect.Parameter(flag.setting, place.kind, default=flag.option(),
                                     annotation=flag.annotation()) for flag in flags]
        parameters = list(signature.parameters.values())
        at = parameters.index(place)

        @functools.wraps(command)
        def with_flags(**values: Any) -> None:
            given = given_settings(flags, {flag.setting: values.pop(flag.setting) for flag in flags})
            command(settings_given=given, **values)

        with_flags.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*parameters[:at], *options, *parameters[at + 1:]])
        with_flags.__doc__ = f"{inspect.cleandoc(command.__doc__ or '')}\n\n{ENV_NOTE}".strip()
        with_flags.settings_flags = flags  # type: ignore[attr-defined]  # for the tests
        return with_flags

    return wrap

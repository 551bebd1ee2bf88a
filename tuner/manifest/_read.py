"""Reading a manifest: YAML or JSON text, a file, a decoded document."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from tilewise.errors import InputError
from tilewise.manifest._model import Manifest, ManifestError, structure_error


def parse_manifest(doc: object, *, source: str | None = None) -> Manifest:
    """A manifest from a decoded document (a mapping).

    Raises:
        ManifestError: the document is not a manifest; the message names the place.
    """
    if not isinstance(doc, Mapping):
        raise ManifestError(
            (),
            f"a manifest is a mapping with a workloads list, got {type(doc).__name__}",
            source=source,
        )
    try:
        manifest = Manifest.model_validate(doc)
    except ValidationError as exc:
        raise structure_error(exc, source) from None
    manifest._source = source
    return manifest


def load_manifest(path: str | Path) -> Manifest:
    """Read a manifest file: JSON when its name ends in ``.json``, YAML otherwise.

    Raises:
        ManifestError: the file is not a valid manifest (the message names the file and place).
        InputError: the file cannot be read.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InputError(f"cannot read manifest {path}: {reason}") from exc
    return parse_text(text, source=str(path), as_json=path.suffix.lower() == ".json")


def parse_text(text: str, *, source: str, as_json: bool = False) -> Manifest:
    """A manifest from JSON or YAML text (see :func:`load_manifest`)."""
    if as_json:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ManifestError((), f"not JSON: {exc}", source=source) from None
    else:
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ManifestError(
                (), f"not YAML: {' '.join(str(exc).split())}", source=source
            ) from None
    return parse_manifest(doc, source=source)

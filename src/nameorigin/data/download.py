"""Fetching the PyTorch tutorial corpus: into a temporary file, checked, then moved into place in one rename."""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from nameorigin.base.errors import UserError
from nameorigin.config import CORPUS_URL


def download_corpus(root: str | Path, url: str = CORPUS_URL) -> Path:
    """Fetch the tutorial zip into a temp file, check it, then move `names/*.txt` into `root` in one rename."""
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=".download-") as tmp:
        archive = Path(tmp) / "data.zip"
        try:
            with urllib.request.urlopen(url, timeout=60) as response, archive.open("wb") as out:
                shutil.copyfileobj(response, out)
        except (OSError, ValueError) as error:  # ValueError: not a URL at all (data.url=foo)
            raise UserError(
                f"could not download the corpus from {url} ({error}): put the <Language>.txt files "
                f"in {root} or pass data.root=<folder>"
            ) from None
        try:
            with zipfile.ZipFile(archive) as zf:
                members = [m for m in zf.namelist() if m.endswith(".txt") and "/names/" in f"/{m}"]
                if not members:
                    raise UserError(f"{url} holds no names/*.txt: pass data.root=<folder of <Language>.txt>")
                staged = Path(tmp) / "names"
                staged.mkdir()
                for member in members:
                    (staged / Path(member).name).write_bytes(zf.read(member))
        except (zipfile.BadZipFile, EOFError, OSError) as error:
            raise UserError(f"{url} is not a valid zip ({error}): retry, or put the files in {root}") from None
        if root.exists() and not any(root.iterdir()):
            root.rmdir()
        os.replace(staged, root)
    return root

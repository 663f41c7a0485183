"""files.refuse_outputs (issue 32): every output of a verb checked before any is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from halluprobe.errors import InputError
from halluprobe.files import refuse_outputs


def test_every_output_is_checked_up_front(tmp_path: Path) -> None:
    paths = [tmp_path / "out" / name for name in ("a.md", "b.tex", "c.json")]
    assert refuse_outputs(paths, overwrite=False) == paths  # nothing there: fine, nothing created
    assert not (tmp_path / "out").exists()
    paths[1].parent.mkdir()
    paths[1].write_text("mine")
    paths[2].write_text("mine too")
    with pytest.raises(InputError, match=r"b.tex: exists \(and 1 more of the files this command writes\): pass --overwrite"):
        refuse_outputs(paths, overwrite=False)
    refuse_outputs(paths, overwrite=True)
    paths[0].mkdir()
    with pytest.raises(InputError, match="a folder stands where this command writes a file"):
        refuse_outputs(paths, overwrite=True)
    paths[0].rmdir()
    paths[0].symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match="symbolic link to nothing"):
        refuse_outputs(paths, overwrite=True)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="must be a folder, not a file"):
        refuse_outputs([blocker / "a.md"], overwrite=True)

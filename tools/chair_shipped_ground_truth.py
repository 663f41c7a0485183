"""One-off: derive the shipped CHAIR ground truth and the standard image lists.

Reads the published ``chair.pkl`` evaluator caches with a RESTRICTED unpickler (only builtin
containers, strings and numbers; the cache's ``CHAIR`` object becomes a plain attribute holder,
so no code of the cache runs) and writes, into the package:

- ``data/lists.json``: the two standard 500-image lists (image ids and file names), with their
  source repository, commit, path and sha256;
- ``data/ground_truth_{lemmatizer,singularize}.json``: each family's object sets for the images
  of both lists, with the source cache and COCO's attribution (CC BY 4.0).

The product never unpickles anything; this script is kept so the data can be re-derived::

    python tools/chair_shipped_ground_truth.py --lemmatizer-pkl RITUAL_chair.pkl \
        --singularize-pkl Maxlinn_chair.pkl --lim-list chair-500.jsonl --opera-list coco_chair.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import pickle
from pathlib import Path
from typing import Any

PACKAGE_DATA = (
    Path(__file__).resolve().parents[1]
    / "src"
    / "halluprobe"
    / "benchmarks"
    / "chair"
    / "data"
)
CACHES = {
    "lemmatizer": "sangminwoo/RITUAL commit 6cabb6fc0dea4557433f4ea107a2f759c12b4637, chair.pkl (shikiw/OPERA chair.py, lemmatizer family)",
    "singularize": "Maxlinn/CHAIR-metric-standalone commit 471eb7539d8aa930790855e431aaf8cfc2467117, chair.pkl (singularize family)",
}
LISTS = {
    "chair500-lim": {"repo": "yuezih/less-is-more", "commit": "1be0e63f33e57a81d543930c8a0701ebb5e3680c",
                     "path": "CHAIR-eval/data/chair-500.jsonl", "images": "COCO train2017 file names"},
    "chair500-opera": {"repo": "xing0047/cca-llava", "commit": "77379aa458366980d3bd4a0b9e53c3496a9cb9b1",
                       "path": "playground/data/coco_chair.jsonl", "images": "COCO val2014 ids (OPERA's LLaVA set)"},
}  # fmt: skip
ATTRIBUTION = (
    "Derived from the COCO 2014 annotations (Lin et al. 2014, cocodataset.org), "
    "licensed CC BY 4.0 by the COCO Consortium."
)


class _Holder:
    """Stands in for the cache's CHAIR object: keeps its attributes, runs nothing."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class _RestrictedUnpickler(pickle.Unpickler):
    ALLOWED = {("builtins", "list"), ("builtins", "set"), ("builtins", "dict"), ("builtins", "frozenset"),
               ("builtins", "tuple"), ("collections", "defaultdict")}  # fmt: skip

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            import builtins
            import collections

            return getattr(builtins if module == "builtins" else collections, name)
        if (module, name) == ("__main__", "CHAIR"):
            return _Holder
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def read_cache(path: Path) -> dict[int, list[str]]:
    holder = _RestrictedUnpickler(io.BytesIO(path.read_bytes())).load()
    if not isinstance(holder, _Holder):
        raise SystemExit(f"{path}: not a CHAIR evaluator cache")
    objects = holder.__dict__["imid_to_objects"]
    return {int(k): sorted(v) for k, v in objects.items()}


def read_list(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    rows = (
        json.loads(text)
        if text.lstrip().startswith("[")
        else [json.loads(line) for line in text.splitlines() if line.strip()]
    )
    out = []
    for row in rows:
        if "image_id" in row:
            out.append(
                {
                    "image_id": int(row["image_id"]),
                    "image": f"COCO_val2014_{int(row['image_id']):012d}.jpg",
                }
            )
        else:
            out.append(
                {
                    "image_id": int(Path(row["image"]).stem.split("_")[-1]),
                    "image": row["image"],
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lemmatizer-pkl", type=Path, required=True)
    parser.add_argument("--singularize-pkl", type=Path, required=True)
    parser.add_argument("--lim-list", type=Path, required=True)
    parser.add_argument("--opera-list", type=Path, required=True)
    args = parser.parse_args()
    lists = {}
    for name, path in (
        ("chair500-lim", args.lim_list),
        ("chair500-opera", args.opera_list),
    ):
        lists[name] = {
            **LISTS[name],
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "entries": read_list(path),
        }
    wanted = sorted({e["image_id"] for spec in lists.values() for e in spec["entries"]})
    PACKAGE_DATA.mkdir(parents=True, exist_ok=True)
    (PACKAGE_DATA / "lists.json").write_text(
        json.dumps(lists, separators=(",", ":")) + "\n", encoding="utf-8"
    )
    for family, path in (
        ("lemmatizer", args.lemmatizer_pkl),
        ("singularize", args.singularize_pkl),
    ):
        cache = read_cache(path)
        missing = [i for i in wanted if i not in cache]
        if missing:
            raise SystemExit(
                f"{path}: images {missing[:5]} of the lists are not in the cache"
            )
        data = {
            "source": f"{CACHES[family]}; sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}; "
                      f"{len(cache)} images in the cache, the {len(wanted)} of the standard lists kept",
            "attribution": ATTRIBUTION,
            "objects": {str(i): cache[i] for i in wanted},
        }  # fmt: skip
        (PACKAGE_DATA / f"ground_truth_{family}.json").write_text(
            json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8"
        )
        print(f"{family}: {len(cache)} cached images, {len(wanted)} written")


if __name__ == "__main__":
    main()

"""Every POPE the literature uses, pinned: where each file lives, its sha256, what it asks.

POPE is not only COCO (docs/pope-versions.md): decoding-method papers report A-OKVQA and GQA
(the POPE authors' SEEM-labelled files), and newer sets were built the same way (RePOPE,
DASH-B, POPEv2). Each :class:`DatasetVersion` names its source files at a commit of the
authors' repository with their sha256, the POPE-format question files halluprobe writes from
them (file name -> content fingerprint, :mod:`halluprobe.benchmarks.fingerprint`) and where
their images come from. :func:`identify_fingerprint` tells which published file a set of
questions is, whatever its bytes (VCD's JSON-lines copies of A-OKVQA and GQA included).

DASH-B's and POPEv2's own files are not POPE-shaped; :mod:`halluprobe.benchmarks.dataset_files`
turns them into question files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from halluprobe.benchmarks.download import mirror_url
from halluprobe.benchmarks.sources import POPE_VERSIONS, pope_version
from halluprobe.errors import InputError

__all__ = [
    "DATASETS",
    "SourceFile",
    "DatasetVersion",
    "ImageSource",
    "dataset_version",
    "known_fingerprints",
    "identify_fingerprint",
    "counts_hint",
]

POPE_REPO = "RUCAIBox/POPE"  # formerly AoiDragon/POPE: GitHub serves both names
# Where a dataset's images come from: public COCO folders are fetched; the others are checked
# in the user's folder (their archives are behind no pinned URL).
ImageSource = Literal["coco-val2014", "popev2", "user"]


@dataclass(frozen=True)
class SourceFile:
    """One file at a commit of a public GitHub repository, pinned by its sha256."""

    repository: str
    commit: str
    path: str
    sha256: str
    size: int | None = None  # bytes, where known: bounds the download (else download.DEFAULT_MAX_BYTES)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def url(self, mirror: str | None = None) -> str:
        """raw.githubusercontent.com at the commit, or ``<mirror>/<repository>/<commit>/<path>``
        (a mirror given as a plain folder path is that folder; one that is no folder is one line)."""
        base = (mirror_url(mirror, "HALLUPROBE_GITHUB_URL").rstrip("/") + "/") if mirror else "https://raw.githubusercontent.com/"
        return f"{base}{self.repository}/{self.commit}/{self.path}"


@dataclass(frozen=True)
class DatasetVersion:
    """One published content of one dataset.

    ``sources``: output file name -> the source file it is made from (POPE-shaped sources are
    copied byte for byte under the output name; DASH-B's and POPEv2's are converted, several
    sources to one output where ``shape`` says so). ``fingerprints``: output file name ->
    content fingerprint of its questions. ``copies``: other known files with the same
    questions (e.g. VCD's JSON-lines re-saves), path -> sha256, for detection only."""

    dataset: str
    version: str
    date: str
    shape: Literal["pope", "dashb", "popev2"]
    sources: dict[str, tuple[SourceFile, ...]]
    fingerprints: dict[str, str]
    images: ImageSource
    counts: dict[str, int]
    note: str = ""
    copies: dict[str, str] = field(default_factory=dict)


def _pope_coco(version: str, commit: str, date: str, rows: dict[str, tuple[str, int, str]], note: str) -> DatasetVersion:
    """A COCO POPE version: split -> (sha256, questions, fingerprint) of output/coco/coco_pope_<split>.json."""
    return DatasetVersion(
        dataset="coco",
        version=version,
        date=date,
        shape="pope",
        sources={f"coco_pope_{s}.json": (SourceFile(POPE_REPO, commit, f"output/coco/coco_pope_{s}.json", r[0]),) for s, r in rows.items()},
        fingerprints={f"coco_pope_{s}.json": r[2] for s, r in rows.items()},
        images="coco-val2014",
        counts={s: r[1] for s, r in rows.items()},
        note=note,
    )


def _seem(dataset: str, rows: dict[str, tuple[str, str]], vcd: dict[str, str], images: ImageSource, note: str) -> DatasetVersion:
    """POPE's SEEM-labelled A-OKVQA / GQA files: split -> (sha256, fingerprint); ``vcd``: split
    -> sha256 of VCD's JSON-lines copy."""
    commit = "9b5410653a70098c433574841a1804b89f573575"
    return DatasetVersion(
        dataset=dataset,
        version="2023-10-26",
        date="2023-10-26",
        shape="pope",
        sources={
            f"{dataset}_pope_{s}.json": (SourceFile(POPE_REPO, commit, f"output/seem/{dataset}/{dataset}_pope_seem_{s}.json", r[0]),)
            for s, r in rows.items()
        },
        fingerprints={f"{dataset}_pope_{s}.json": r[1] for s, r in rows.items()},
        images=images,
        counts={s: 3000 for s in rows},
        note=note,
        copies={
            f"DAMO-NLP-SG/VCD@1bb047819da691320474cc0d2d3dd1c3e247ec4a:experiments/data/POPE/{dataset}/{dataset}_pope_{s}.json": sha
            for s, sha in vcd.items()
        },
    )


_D = "9b5410653a70098c433574841a1804b89f573575"
_REPOPE = "bcf22e5690d587cce34e1728af3efdcfaf747d29"
_DASHB = "1538d01da15ef152dca8a8405da3f9444e26661d"
_POPEV2 = "08d957b917e5a378a2f99d35b6293c536a66298b"

# Facts measured from the repositories at these commits (sha256 of the bytes as committed;
# fingerprints of the question files written from them).
_ALL: tuple[DatasetVersion, ...] = (
    _pope_coco("2023-08-10", "e3e39262c85a6a83f26cf5094022a782cb0df58d", "2023-08-10", {
        "random": ("c16b65d2df6d70bb0814c8a4375833d39cdb09928fd936d3fc546491efa37f35", 2910, "0b3d745babb297183b18a6ec8f0ef58d0352af632e943db9dfea676a78f69424"),
        "popular": ("5b16653023bf4f64d57eb0d168259de6627f5cde7538b85ebed3cc33034aa6cc", 3000, "db797df08641986993212fb2cc04ba9c42bef5cb01dcd953f25435e25c85d6b5"),
        "adversarial": ("1d8f0906a9b50c05640f6f23abfac97523be2a1bed28f7eadc63b811699b2d26", 3000, "86988408eeb70c30cf96dd4e73e0bfdf1747131c6cfe48edeabf86beb13aef64"),
    }, "as first published; 2,910 random questions; 144/44/58 prompts read 'imange'; LLaVA-1.5's"),
    _pope_coco("2023-08-04", "7ef3026faa9a89ed11fd508385fad652fdc6349f", "2023-08-04", {
        "random": ("cb8dec967727fbee4b9cfadf9ba1ea9968515b12063efd313d0cf8b2b4230c86", 3000, "7eb4a1000640187820546ba7787d3d6b30b6453586158720768df15a2c9d9677"),
        "popular": ("eafca6ceff32c7bbb5b2845a00c6828ec8cbaf5e04f890d6902dc46b92f96076", 3000, "d5bc903ba73c0602dec70156c368014ec2cf43c59385122da75eee6019a14c93"),
        "adversarial": ("412efc6fe25eb2604f2386d536bcf713dc88327cb20c36489b1f689f89617d04", 3000, "f0fe4da7a1f1e27aaab2ba43f394580a626cb47d9c4e75ece9518747da8a953b"),
    }, "other questions altogether, replaced six days later"),
    _pope_coco("2023-10-09", "edebdda36a969afac02bc49972c48c38e24dc6fe", "2023-10-09", {
        "random": ("ac25245170b975a5bdf9080b23fd431dfe6be458bc038259c1f4f09a6bef7994", 3000, "10c4c09a334fd772974df6f5b8c9d9cd0640c280baf7a669a01d12e9a54ab9a5"),
        "popular": ("72c1a8ad45d0c13514f5f22598261df41d3b533854d29682e924db50ed8aa753", 3000, "a08a46110555fd76b9d2dac2d86aaa6fbfa77d68b81831893659a96d61f820a2"),
        "adversarial": ("207273ac3b7fdd04df206c6809b77a4e7f60360a730ade6b7e32804e8dd5602f", 3000, "68ea82e7725219da11b161996f86fd3087c3f662a396160a60576dda7cd97ec9"),
    }, "3,000 random questions; 57 adversarial prompts still read 'imange'"),
    _pope_coco("2023-11-16", "109985c74a00a88ba5341f9b0c1d4900f2a1f789", "2023-11-16", {
        "random": ("ac25245170b975a5bdf9080b23fd431dfe6be458bc038259c1f4f09a6bef7994", 3000, "10c4c09a334fd772974df6f5b8c9d9cd0640c280baf7a669a01d12e9a54ab9a5"),
        "popular": ("72c1a8ad45d0c13514f5f22598261df41d3b533854d29682e924db50ed8aa753", 3000, "a08a46110555fd76b9d2dac2d86aaa6fbfa77d68b81831893659a96d61f820a2"),
        "adversarial": ("420b3407db1fa9f1187a805dca41cb7b97fd91504e6c2179706188c107fb8ef8", 3000, "ab23af7b80137de8cab3457ba5a898511a1e91bc42c657aa748c438d724ac012"),
    }, "current"),
    _seem("aokvqa", {
        "random": ("f06eecde6d6ef4a00b95a7bbb510490708a09a6a67d952b59b8bdd33ac2c7200", "9766a21778b74648d27712d13e2d1455d1df727d116039057b321804d6b34547"),
        "popular": ("2ae5bedee3450cda52f9b033942c7b04a3917a86a110e859a66c1e41934c6ffd", "3351c45f9f27677c0d16311e44179806b692b0ea34a10c815300b05f88bb745e"),
        "adversarial": ("2ddd3bdfa0df7a77a2cb1765ed06ac5ed190b5a093aa405b96986e862e8cdac1", "72fc712bb8fbbf3114dd9a364a345130aadc6abb11d439f0373ebee9d13b0dce"),
    }, {
        "random": "900c244605e8d43626b9579a110e3631e534cddc2aff27fe91e3f080e15d4446",
        "popular": "792d586a875c197362256b25e9252cc97df6fa1dca5aca72a53eba560414d6b7",
        "adversarial": "87f9acb460fcb690f9120c6d69eb05cfedadab5af5eb385b5201fd48bfc6670c",
    }, "coco-val2014", "SEEM-segmented labels over COCO val2014 images; JSON arrays"),
    _seem("gqa", {
        "random": ("6ce488eade3770185034939fabfe742fa32ed369011c8d9c3ac77bc0c85abd94", "32e058d77cba65913366fb38c93b27d87f623a6f8a6c6c37df4f5f2d94280cac"),
        "popular": ("dd03f06a458dd216e83233160fbf6628af9c63c84b11e99599f4fc0304b3361d", "ec84b25f1a8cf13fe3a3f15bd64086e24d6561cb097a803171a74ad3023de826"),
        "adversarial": ("74e01b41d8308e2392e3b8d961167496ff3901c01100265d931a7a392f138a7a", "8fb26522b86fb748b0d31ba7ee8cf0acdf857e709f27cacb866e50b915e98886"),
    }, {
        "random": "1c1117ce33df2eae0d7b04827896caff1f79dac7b99b9e1b0c87a415066cff98",
        "popular": "e48e138bd61dd3bc4ec35cc8d4357b4dbfc68f0e704283a92217325585a17653",
        "adversarial": "64a3bdeb8d24c02d175eafa5e1b24bc7fd611efa95bb87a031c880e548aef094",
    }, "user", "SEEM-segmented labels over Visual Genome images (bare ids: 2405722.jpg); JSON arrays"),
    DatasetVersion(
        dataset="repope",
        version="2025-04-10",
        date="2025-04-10",
        shape="pope",
        sources={
            f"repope_pope_{s}.json": (SourceFile("YanNeu/RePOPE", _REPOPE, f"annotations/coco_repope_{s}.json", sha),)
            for s, sha in (
                ("random", "f464fcaf60b24ce2f280cf33f122e000dbdd35c8e88f77c4141c9c2cba864611"),
                ("popular", "57832b055bae5fd6176278a4f104c98ddd84811f7d26dfcb93d481f6c9da09a5"),
                ("adversarial", "8c346dbb060bf422ff92e769fa68e5ab3e8a777cb28a26e973387441e05c9ccf"),
            )
        },
        fingerprints={
            "repope_pope_random.json": "f8a56548433b55082f54e28df48dd44405ea4c86885f4aaa567dfe2b39f4d33b",
            "repope_pope_popular.json": "e28373d7f1ffefff2547468e15e32b352aaa176660f5e7b2ec5452d169f8273b",
            "repope_pope_adversarial.json": "f06350896bcb78d782bd7a0bf205e825a06246c5f0399b780fe1a54cfb0d94d5",
        },
        images="coco-val2014",
        counts={"random": 2774, "popular": 2727, "adversarial": 2684},
        note="POPE 2023-11-16 relabelled by hand, ambiguous questions removed",
    ),
    DatasetVersion(
        dataset="dashb",
        version="2025-03-31",
        date="2025-03-31",
        shape="dashb",
        sources={
            "dashb.jsonl": (
                SourceFile("YanNeu/DASH-B", _DASHB, "images/dash_benchmark_neg.json", "29d9afa611083f3becdc64e4c30a1783a6c8be9bf6d335a12b124c50ad2876ed"),
                SourceFile("YanNeu/DASH-B", _DASHB, "images/dash_benchmark_pos.json", "fe261c2b9463e27034aea34368330ae4645cfd3bc0feca907240eb5160517829"),
            )
        },
        fingerprints={"dashb.jsonl": "06e0d45837eaef134266bc8237036aec48fe0135d826ccbc4306c608b4c16015"},
        images="user",
        counts={"dashb": 2682},
        note="1,341 negative + 1,341 positive images over 70 objects; an image is (object, file name)",
    ),
    DatasetVersion(
        dataset="popev2",
        version="2025-08-21",
        date="2025-08-21",
        shape="popev2",
        sources={"popev2.jsonl": (SourceFile(POPE_REPO, _POPEV2, "POPEv2/dataset/annotations.json", "321d8dd41a7bd9be5f863c88f40bf50965b6e5f3345db42fe04fcb4c6ba9570e"),)},
        fingerprints={"popev2.jsonl": "2be8b4e9792be41b8a8378938e4703bc3e9d171fb619bed47dae6f97ff8bef0a"},
        images="popev2",
        counts={"popev2": 1000},
        note="500 COCO train2017 images, each paired with a copy edited to remove the object; the edited images are not in the repository",
    ),
)  # fmt: skip

DATASETS: dict[str, dict[str, DatasetVersion]] = {}
for _v in _ALL:
    DATASETS.setdefault(_v.dataset, {})[_v.version] = _v
# the version a dataset gets when none is named
_DEFAULT = {"coco": "2023-11-16"}
_ALIASES = {"coco": {"2023-05": "2023-08-10", "2023-08": "2023-08-10", "2023-10": "2023-10-09", "2023-11": "2023-11-16", "current": "2023-11-16"}}


def dataset_version(dataset: str, version: str | None = None) -> DatasetVersion:
    """The pinned ``dataset`` at ``version`` (its only or current one when None); InputError
    naming the known datasets or versions."""
    versions = DATASETS.get(dataset)
    if versions is None:
        raise InputError(f"unknown POPE dataset {dataset!r}; known: {', '.join(DATASETS)}")
    if version is None:
        version = _DEFAULT.get(dataset, next(reversed(versions)))
    if dataset == "coco":  # sources.py's table is the COCO one: its message names its aliases

        version = pope_version(version).name
    found = versions.get(_ALIASES.get(dataset, {}).get(version, version))
    if found is None:
        known = ", ".join([*versions, *_ALIASES.get(dataset, {})])
        raise InputError(f"unknown version {version!r} of POPE dataset {dataset!r}; known: {known}")
    return found


def known_fingerprints() -> dict[str, list[str]]:
    """fingerprint -> every ``dataset@version:file`` whose questions it is."""
    table: dict[str, list[str]] = {}
    for v in (v for versions in DATASETS.values() for v in versions.values()):
        for name, fp in v.fingerprints.items():
            table.setdefault(fp, []).append(f"{v.dataset}@{v.version}:{name}")
    return table


def identify_fingerprint(fingerprint: str) -> list[str]:
    """The pinned question files with this content fingerprint (none: not a published file)."""
    return known_fingerprints().get(fingerprint, [])


def counts_hint(split: str, n_questions: int, n_misspelled: int) -> str:
    """For questions that are no pinned file: which pinned versions have the same number of
    questions in ``split`` and the same number reading "imange" (LLaVA-1.5's random split:
    2,910 and 144), so a re-saved or subsetted copy can still be placed."""

    same = [f"coco@{v.name}" for v in POPE_VERSIONS.values() if v.counts.get(split) == n_questions and v.misspelled.get(split) == n_misspelled]
    same += [f"{v.dataset}@{v.version}" for v in _ALL if v.dataset != "coco" and v.counts.get(split) == n_questions and n_misspelled == 0]
    head = f"{n_questions} {split} questions, {n_misspelled} reading 'imange'"
    return f"{head}: the counts of {', '.join(same)} (other questions, labels or order)" if same else f"{head}: no pinned version has these counts"

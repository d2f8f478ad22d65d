"""What ``/filtering_terms`` lists: what a researcher can ask MBeacon by, among the datasets the caller
may see.

MBeacon takes no Beacon filters in a query (a request with filters is refused, naming them): a
methylation question names CpGs by probe, region or gene and a range of beta values. The list therefore
says what those names and the datasets' public attributes can be, in the framework's filtering-term
shape, so that a Beacon Network that builds its query form from members' filtering terms shows ours:

- the datasets' public attributes (``tissue``, ``disease``, ``assembly``: alphanumeric terms with their
  values), scope ``dataset``;
- each probe platform whose annotation locates the datasets' probes (``platform:GPL13534``), scope
  ``dataset``;
- each gene of those annotations (``geneId:BRCA1``: the ``geneId`` request parameter), scope
  ``methylation``.

Nothing here is private: attributes and platforms are those ``/datasets`` shows the same caller, and
genes come from the public platform annotations.
"""

from __future__ import annotations

from mbeacon.api.runtime import runtime
from mbeacon.beacon.wire import ENTRY_TYPE

ATTRIBUTES = ("tissue", "disease", "assembly")
"""The public dataset attributes listed as alphanumeric terms."""


def filtering_terms(datasets: list[str]) -> list[dict]:
    """Every term of ``datasets``, in a stable order: attributes, platforms, then genes (sorted)."""
    engine = runtime().engine
    values: dict[str, set[str]] = {name: set() for name in ATTRIBUTES}
    platforms: set[str] = set()
    genes: set[bytes] = set()
    for dataset in datasets:
        info = engine.cohort(dataset).info
        for name in ATTRIBUTES:
            value = getattr(info, name)
            if value:
                values[name].add(value)
        located = engine.located(dataset)
        if located.platform:
            platforms.add(located.platform)
        if located.genes is not None:
            genes.update(located.genes.gene_names.tolist())
    terms = [
        {"type": "alphanumeric", "id": name, "label": f"dataset {name}", "scopes": ["dataset"],
         "values": sorted(found)}
        for name, found in values.items()
        if found
    ]  # fmt: skip
    terms += [
        {"type": "custom", "id": f"platform:{platform}", "label": f"probe platform {platform}",
         "scopes": ["dataset"]}
        for platform in sorted(platforms)
    ]  # fmt: skip
    terms += [
        {"type": "custom", "id": f"geneId:{name}", "label": name, "scopes": [ENTRY_TYPE]}
        for name in sorted(gene.decode() for gene in genes)
    ]
    return terms

"""mybackend in torch's logging: TORCH_LOGS and TORCH_TRACE (tlparse).

``TORCH_LOGS="+mybackend"`` turns every channel (``mybackend.<channel>``) on
at DEBUG with torch's log format; ``TORCH_LOGS="mybackend"`` at INFO.
``emit_graph_artifacts()`` writes two artifacts
per compiled graph, ``mybackend_partition_map_<graph>`` (graphviz DOT) and
``mybackend_fallback_report_<graph>`` (JSON), into TORCH_TRACE (structured,
for tlparse, beside dynamo's), and logs them at DEBUG on the ``partition``
and ``fallback`` channels.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from torch._logging._internal import trace_structured

from mybackend._logging import get_logger, register_with_torch_logging
from mybackend.reports import GraphRecord, fallbacks_of, partition_dot

PARTITION_MAP = "mybackend_partition_map"
FALLBACK_REPORT = "mybackend_fallback_report"
CHANNEL_OF = {PARTITION_MAP: "partition", FALLBACK_REPORT: "fallback"}


def fallback_report(record: GraphRecord) -> dict[str, Any]:
    """The JSON payload of the fallback artifact of one graph."""
    return {
        "graph": record.name,
        "kind": record.kind,
        "compiled": record.core_report is not None,
        "fallback_reason": record.fallback_reason,
        "repro": record.repro_path,
        "partitions": len(record.core_report["partitions"]) if record.core_report else 0,
        "fallback_nodes": [
            {k: n[k] for k in ("name", "op", "reason", "source")} for n in fallbacks_of(record)
        ],
    }


def emit_graph_artifacts(record: GraphRecord) -> None:
    """Writes the partition map and fallback report of a graph to torch's logs."""
    register_with_torch_logging()
    payloads = {FALLBACK_REPORT: lambda: json.dumps(fallback_report(record), indent=1)}
    if record.has_core_report:
        payloads[PARTITION_MAP] = lambda: partition_dot(record)
    for artifact, payload in payloads.items():
        trace_structured(
            "artifact",
            metadata_fn=lambda artifact=artifact: {  # type: ignore[misc]
                "name": f"{artifact}_{record.name}",
                "encoding": "string",
            },
            payload_fn=payload,
            expect_trace_id=False,
        )
        logger = get_logger(CHANNEL_OF[artifact])
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s %s:\n%s", artifact, record.name, payload())

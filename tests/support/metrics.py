"""A component's Prometheus metrics, as the end-to-end tests read them: `scrape` its /metrics, `value` of
one sample."""

from __future__ import annotations

import ssl

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, verify: ssl.SSLContext | bool) -> Samples:
    response = httpx.get(f"{url}/metrics", timeout=5.0, verify=verify)
    response.raise_for_status()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))

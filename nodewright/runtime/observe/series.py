"""Cheap metric series for the hot path, exported to a Prometheus registry at scrape time.

Owns ``SeriesCollector`` (a ``prometheus_client`` collector) and the families it exports:
``CounterFamily``, ``GaugeFamily`` (which also counts up and down) and ``HistogramFamily``, each
with OpenTelemetry-like ``add``/``set``/``record(value, attributes)``, and ``bind(attributes)``
for a child whose update is one lock and one addition; and ``ObservedGaugeFamily``, read through
a callback at scrape time. The controller and the work queue update their series on every
reconcile and every queue operation through bound children.

Why not OpenTelemetry instruments for these: each measurement rebuilt and hashed its attribute
set and walked the reader's storage, a fifth of the Widget benchmark's CPU
(``bench/results/profiles``). Names, types and labels stay controller-runtime's; other layers
keep creating OpenTelemetry instruments on the manager's ``metrics.provider``.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar, cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = [
    "CounterFamily",
    "GaugeFamily",
    "HistogramFamily",
    "ObservedGaugeFamily",
    "SeriesCollector",
]

Labels = tuple[str, ...]
_go_float = cast(Callable[[float], str], floatToGoString)  # an "le" label as Go's client writes it


class _Value:
    """One counter or gauge series."""

    __slots__ = ("_lock", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0.0

    def add(self, amount: float) -> None:
        with self._lock:
            self.value += amount

    def set(self, value: float) -> None:
        self.value = float(value)


class _Buckets:
    """One histogram series: counts per bucket (the last is +Inf) and the sum."""

    __slots__ = ("_bounds", "_lock", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self._lock = threading.Lock()
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def record(self, value: float) -> None:
        index = bisect.bisect_left(self._bounds, value)
        with self._lock:
            self.counts[index] += 1
            self.total += value


class _Family:
    def __init__(self, name: str, description: str, label_names: Sequence[str]) -> None:
        self.name = name
        self.description = description
        self.label_names: Labels = tuple(label_names)
        self._lock = threading.Lock()

    def _key(self, attributes: Mapping[str, str]) -> Labels:
        return tuple(str(attributes.get(label, "")) for label in self.label_names)


class CounterFamily(_Family):
    """A monotonic counter (its name ends in ``_total``) per label set."""

    _exported_as: type[CounterMetricFamily | GaugeMetricFamily] = CounterMetricFamily

    def __init__(self, name: str, description: str, label_names: Sequence[str]) -> None:
        super().__init__(name, description, label_names)
        self._series: dict[Labels, _Value] = {}

    def bind(self, attributes: Mapping[str, str]) -> _Value:
        key = self._key(attributes)
        found = self._series.get(key)
        if found is None:
            with self._lock:
                found = self._series.setdefault(key, _Value())
        return found

    def add(self, amount: float, attributes: Mapping[str, str]) -> None:
        self.bind(attributes).add(amount)

    def collect(self) -> Metric:
        family = self._exported_as(self.name, self.description, labels=self.label_names)
        for key, series in list(self._series.items()):
            family.add_metric(key, series.value)
        return family


class GaugeFamily(CounterFamily):
    """A gauge per label set: ``set`` it, or ``add`` to it (an up-down counter)."""

    _exported_as = GaugeMetricFamily

    def set(self, value: float, attributes: Mapping[str, str]) -> None:
        self.bind(attributes).set(value)


class HistogramFamily(_Family):
    """A histogram with fixed bucket bounds per label set."""

    def __init__(
        self, name: str, description: str, label_names: Sequence[str], bounds: Sequence[float]
    ) -> None:
        super().__init__(name, description, label_names)
        self.bounds = tuple(sorted(bounds))
        self._series: dict[Labels, _Buckets] = {}

    def bind(self, attributes: Mapping[str, str]) -> _Buckets:
        key = self._key(attributes)
        found = self._series.get(key)
        if found is None:
            with self._lock:
                found = self._series.setdefault(key, _Buckets(self.bounds))
        return found

    def record(self, value: float, attributes: Mapping[str, str]) -> None:
        self.bind(attributes).record(value)

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.description, labels=self.label_names)
        edges = [_go_float(bound) for bound in self.bounds] + ["+Inf"]
        for key, series in list(self._series.items()):
            counts, total = list(series.counts), series.total
            cumulative, running = [], 0
            for edge, count in zip(edges, counts, strict=True):
                running += count
                cumulative.append((edge, float(running)))
            family.add_metric(key, cumulative, total)
        return family


class ObservedGaugeFamily:
    """A gauge whose series ``read()`` gives at scrape time, as (attributes, value) pairs."""

    def __init__(
        self,
        name: str,
        description: str,
        label_names: Sequence[str],
        read: Callable[[], Iterable[tuple[Mapping[str, str], float]]],
    ) -> None:
        self.name = name
        self.description = description
        self.label_names: Labels = tuple(label_names)
        self._read = read

    def collect(self) -> Metric:
        family = GaugeMetricFamily(self.name, self.description, labels=self.label_names)
        for attributes, value in self._read():
            family.add_metric([str(attributes.get(label, "")) for label in self.label_names], value)
        return family


Family = CounterFamily | HistogramFamily | ObservedGaugeFamily
F = TypeVar("F", CounterFamily, GaugeFamily, HistogramFamily, ObservedGaugeFamily)


class SeriesCollector(Collector):
    """The families of one manager, collected into its registry on every scrape."""

    def __init__(self) -> None:
        self._families: list[Family] = []

    def add(self, family: F) -> F:
        self._families.append(family)
        return family

    def describe(self) -> Iterable[Metric]:
        return []  # names are not checked against other collectors at registration

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield family.collect()

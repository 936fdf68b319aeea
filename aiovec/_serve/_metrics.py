"""Prometheus metrics for the server, rendered in the text exposition format 0.0.4, with no
dependency.

``Metrics`` is a registry: its ``counter``, ``gauge`` and ``histogram`` methods make a metric,
register it and return it; ``render()`` writes every registered metric, in registration order,
as the body of a ``/metrics`` reply (served with ``CONTENT_TYPE``)::

    metrics = Metrics()
    steps = metrics.counter("aiovec_steps_total", "Steps served.", labelnames=("route",))
    latency = metrics.histogram("aiovec_step_seconds", "Time to serve one step.")
    steps.inc(route="http")
    latency.observe(0.0031)

Each metric keeps one series per distinct set of label values, made on first use; a call
naming other labels than the metric declared raises ``ValueError``. Counter names must end in
``_total`` (the Prometheus convention, which OpenMetrics makes a rule).

Not locked: metrics are meant to be updated from one thread, the server's event loop. Reads
and writes of plain Python numbers cannot tear, and ``render()`` copies each metric's series
before walking them, so rendering beside updates from another thread is safe; but two threads
incrementing one series can lose an increment.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import ClassVar, TypeVar

__all__ = ["CONTENT_TYPE", "DEFAULT_LATENCY_BUCKETS", "Counter", "Gauge", "Histogram", "Metrics",
           "format_value"]

#: The media type of ``Metrics.render()``'s text.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Upper bounds, in seconds, for step latencies: from a fraction of a millisecond (an inline
#: CartPole step) to ten seconds (a sub-env restarting, a deadline hit).
DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

_MetricT = TypeVar("_MetricT", bound="_Metric")


def format_value(value: float) -> str:
    """A sample value as Prometheus parses it: ``+Inf``, ``-Inf``, ``NaN``, integral values
    without a fraction or an exponent (``3``, not ``3.0``), others in Python's shortest
    round-tripping form (``0.0005``, ``1e-07``)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _check_metric_name(name: str) -> None:
    if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
        raise ValueError(f"invalid metric name {name!r}: it must match [a-zA-Z_:][a-zA-Z0-9_:]*")


def _check_label_names(labelnames: Iterable[str], reserved: frozenset[str]) -> tuple[str, ...]:
    names = tuple(labelnames)
    if isinstance(labelnames, str):  # labelnames="route" would be five one-letter labels
        raise ValueError(f"labelnames must be a sequence of names, not the string {labelnames!r}")
    for name in names:
        if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name):
            raise ValueError(f"invalid label name {name!r}: it must match [a-zA-Z_][a-zA-Z0-9_]*")
        if name.startswith("__"):
            raise ValueError(f"invalid label name {name!r}: names starting __ are reserved")
        if name in reserved:
            raise ValueError(f"invalid label name {name!r}: this metric type reserves it")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate label names in {names!r}")
    return names


class _Metric:
    """What every metric shares: its name, help, declared labels and series by label values."""

    kind: ClassVar[str]
    _reserved_labels: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        _check_metric_name(name)
        self.name = name
        self.help = help
        self.labelnames = _check_label_names(labelnames, self._reserved_labels)
        # Rendered label text ('a="x",b="y"') of each series, by its tuple of label values.
        self._label_texts: dict[tuple[str, ...], str] = {}

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        """The series key for ``labels``: their values in declared order. Checks the names;
        the values are checked when their series is made (``_new_series``)."""
        if tuple(labels) == self.labelnames:  # the usual call: the declared names, in order
            return tuple(labels.values())
        if labels.keys() != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {list(self.labelnames)}, "
                             f"not {sorted(labels)}")
        return tuple([labels[label] for label in self.labelnames])

    def _new_series(self, key: tuple[str, ...]) -> None:
        """Check a new series' label values and keep its rendered label text."""
        for label, value in zip(self.labelnames, key):
            if not isinstance(value, str):
                raise TypeError(f"{self.name}: label {label} must be a str, "
                                f"not {type(value).__name__}")
        self._label_texts[key] = ",".join(
            f'{label}="{_escape_label_value(value)}"' for label, value in zip(self.labelnames, key))

    def sample_names(self) -> frozenset[str]:
        """Every name this metric's lines use (for the registry's clash check)."""
        return frozenset({self.name})

    def render(self) -> str:
        """This metric's ``# HELP`` and ``# TYPE`` lines and its samples, each ending ``\\n``."""
        lines = [f"# HELP {self.name} {_escape_help(self.help)}\n",
                 f"# TYPE {self.name} {self.kind}\n"]
        self._render_samples(lines)
        return "".join(lines)

    def _render_samples(self, lines: list[str]) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} labels={list(self.labelnames)}>"


class _Scalar(_Metric):
    """A metric holding one number per series: counters and gauges."""

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help, labelnames)
        self._values: dict[tuple[str, ...], float] = {}
        if not self.labelnames:  # an unlabelled metric has its one series from the start
            self._new_series(())
            self._values[()] = 0.0

    def _add(self, amount: float, labels: dict[str, str]) -> None:
        key = self._key(labels) if labels or self.labelnames else ()
        try:
            self._values[key] += amount
        except KeyError:
            self._new_series(key)
            self._values[key] = float(amount)

    def value(self, **labels: str) -> float:
        """The current value of the series ``labels`` name (0 if it was never touched)."""
        return float(self._values.get(self._key(labels), 0.0))

    def _render_samples(self, lines: list[str]) -> None:
        texts = self._label_texts
        for key, value in list(self._values.items()):
            labels = texts[key]
            series = f"{self.name}{{{labels}}}" if labels else self.name
            lines.append(f"{series} {format_value(value)}\n")


class Counter(_Scalar):
    """A total that only goes up (requests served, errors). Its name must end in ``_total``."""

    kind = "counter"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        if isinstance(name, str) and not name.endswith("_total"):
            raise ValueError(f"counter name {name!r} must end in _total")
        super().__init__(name, help, labelnames)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` (not negative) to the series ``labels`` name."""
        if not amount >= 0:  # also refuses NaN
            raise ValueError(f"{self.name}: a counter cannot go down (inc({amount!r}))")
        self._add(amount, labels)


class Gauge(_Scalar):
    """A value that goes up and down (sessions open, sub-envs alive).

    Either set by the caller (``set``, ``inc``, ``dec``), or, with ``read=``, read from a
    callable at every ``render()``; such a gauge has no labels. An exception the callable
    raises propagates out of ``render()``.
    """

    kind = "gauge"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = (),
                 read: Callable[[], float] | None = None) -> None:
        super().__init__(name, help, labelnames)
        if read is not None and self.labelnames:
            raise ValueError(f"{name}: a gauge read from a callable cannot have labels")
        self.read = read

    def _settable(self) -> None:
        if self.read is not None:
            raise TypeError(f"{self.name} is read from a callable; it cannot be set")

    def set(self, value: float, **labels: str) -> None:
        """Set the series ``labels`` name to ``value``."""
        self._settable()
        key = self._key(labels) if labels or self.labelnames else ()
        if key not in self._values:
            self._new_series(key)
        self._values[key] = float(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` to the series ``labels`` name."""
        self._settable()
        self._add(amount, labels)

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        """Take ``amount`` from the series ``labels`` name."""
        self._settable()
        self._add(-amount, labels)

    def value(self, **labels: str) -> float:
        if self.read is not None:
            self._key(labels)  # still refuses labels it does not have
            return float(self.read())
        return super().value(**labels)

    def _render_samples(self, lines: list[str]) -> None:
        if self.read is not None:
            lines.append(f"{self.name} {format_value(self.read())}\n")
        else:
            super()._render_samples(lines)


class _HistogramSeries:
    """One histogram series: observations per bucket (not cumulative; the last one is +Inf)
    and their sum."""

    __slots__ = ("counts", "sum")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * (buckets + 1)
        self.sum = 0.0


class Histogram(_Metric):
    """Observations (step latencies) counted into buckets by upper bound.

    ``buckets`` are the finite upper bounds, increasing; the ``+Inf`` bucket is always added.
    Rendered as Prometheus expects: cumulative ``_bucket{le="..."}`` lines, ``_sum``,
    ``_count``. ``observe`` costs one binary search and three additions.
    """

    kind = "histogram"
    _reserved_labels = frozenset({"le"})

    def __init__(self, name: str, help: str,
                 buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS,
                 labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help, labelnames)
        bounds = [float(bound) for bound in buckets]
        if bounds and bounds[-1] == math.inf:
            bounds.pop()  # +Inf is always there
        if not bounds:
            raise ValueError(f"{name}: a histogram needs at least one finite bucket")
        if any(math.isnan(bound) or math.isinf(bound) for bound in bounds):
            raise ValueError(f"{name}: bucket bounds must be finite numbers, got {list(buckets)}")
        if any(low >= high for low, high in pairwise(bounds)):
            raise ValueError(f"{name}: bucket bounds must increase, got {list(buckets)}")
        self.buckets = tuple(bounds)
        self._bounds = bounds  # a list: bisect indexes it a little faster than a tuple
        self._le_texts = [format_value(bound) for bound in bounds] + ["+Inf"]
        self._series: dict[tuple[str, ...], _HistogramSeries] = {}
        # The one series of an unlabelled histogram, reached without building a key.
        self._unlabelled: _HistogramSeries | None = None
        if not self.labelnames:
            self._new_series(())
            self._unlabelled = self._series[()] = _HistogramSeries(len(bounds))

    def observe(self, value: float, **labels: str) -> None:
        """Count ``value`` into its bucket of the series ``labels`` name."""
        series = self._unlabelled
        if series is None or labels:
            key = self._key(labels)
            series = self._series.get(key)
            if series is None:
                self._new_series(key)
                series = self._series[key] = _HistogramSeries(len(self._bounds))
        # bisect_left: the first bound >= value, as le (less or equal) means. NaN compares
        # false with everything, so it would land in the first bucket; it goes in +Inf only.
        if value == value:
            series.counts[bisect_left(self._bounds, value)] += 1
        else:
            series.counts[-1] += 1
        series.sum += value

    def sample_names(self) -> frozenset[str]:
        return frozenset({self.name, f"{self.name}_bucket", f"{self.name}_sum",
                          f"{self.name}_count"})

    def _render_samples(self, lines: list[str]) -> None:
        name = self.name
        for key, series in list(self._series.items()):
            labels = self._label_texts[key]
            before_le = f"{labels}," if labels else ""
            total = 0
            for le, count in zip(self._le_texts, list(series.counts)):
                total += count
                lines.append(f'{name}_bucket{{{before_le}le="{le}"}} {total}\n')
            braced = f"{{{labels}}}" if labels else ""
            lines.append(f"{name}_sum{braced} {format_value(series.sum)}\n")
            lines.append(f"{name}_count{braced} {total}\n")


class Metrics:
    """A registry of metrics, rendered together for a ``/metrics`` endpoint."""

    CONTENT_TYPE: ClassVar[str] = CONTENT_TYPE

    def __init__(self) -> None:
        self._metrics: list[_Metric] = []
        self._names: set[str] = set()

    def register(self, metric: _MetricT) -> _MetricT:
        """Add a metric made elsewhere; its names must not clash with one already here."""
        clashes = metric.sample_names() & self._names
        if clashes:
            raise ValueError(f"metric {metric.name}: name(s) {sorted(clashes)} already taken")
        self._names |= metric.sample_names()
        self._metrics.append(metric)
        return metric

    def counter(self, name: str, help: str,
                labelnames: Sequence[str] = ()) -> Counter:
        """Make and register a ``Counter``."""
        return self.register(Counter(name, help, labelnames))

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = (),
              read: Callable[[], float] | None = None) -> Gauge:
        """Make and register a ``Gauge`` (``read=``: its value comes from that callable)."""
        return self.register(Gauge(name, help, labelnames, read=read))

    def histogram(self, name: str, help: str,
                  buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS,
                  labelnames: Sequence[str] = ()) -> Histogram:
        """Make and register a ``Histogram``."""
        return self.register(Histogram(name, help, buckets, labelnames))

    def render(self) -> str:
        """Every registered metric in the text exposition format 0.0.4."""
        return "".join(metric.render() for metric in self._metrics)

    def __repr__(self) -> str:
        return f"<Metrics {len(self._metrics)} metrics>"

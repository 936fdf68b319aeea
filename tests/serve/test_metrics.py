"""aiovec._serve._metrics: the Prometheus text exposition format 0.0.4, checked against text
written by hand from the format's description."""

from __future__ import annotations

import math
import re

import pytest

from aiovec._serve._metrics import (
    CONTENT_TYPE,
    DEFAULT_LATENCY_BUCKETS,
    Counter,
    Gauge,
    Histogram,
    Metrics,
    format_value,
)


def test_content_type() -> None:
    assert Metrics.CONTENT_TYPE == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_an_empty_registry_renders_nothing() -> None:
    assert Metrics().render() == ""


def test_counter_unlabelled() -> None:
    metrics = Metrics()
    requests = metrics.counter("http_requests_total", "Requests served.")
    assert metrics.render() == (
        "# HELP http_requests_total Requests served.\n"
        "# TYPE http_requests_total counter\n"
        "http_requests_total 0\n"
    )
    requests.inc()
    requests.inc(2.5)
    assert requests.value() == 3.5
    assert metrics.render() == (
        "# HELP http_requests_total Requests served.\n"
        "# TYPE http_requests_total counter\n"
        "http_requests_total 3.5\n"
    )


def test_counter_labelled_series_in_first_use_order() -> None:
    metrics = Metrics()
    requests = metrics.counter("requests_total", "Requests.", labelnames=("route", "code"))
    assert metrics.render() == "# HELP requests_total Requests.\n# TYPE requests_total counter\n"
    requests.inc(route="/step", code="200")
    requests.inc(code="422", route="/step")  # keyword order does not matter
    requests.inc(3, route="/step", code="200")
    assert requests.value(route="/step", code="200") == 4
    assert requests.value(route="/reset", code="200") == 0  # never touched
    assert metrics.render() == (
        "# HELP requests_total Requests.\n"
        "# TYPE requests_total counter\n"
        'requests_total{route="/step",code="200"} 4\n'
        'requests_total{route="/step",code="422"} 1\n'
    )


def test_label_values_and_help_are_escaped() -> None:
    metrics = Metrics()
    errors = metrics.counter("errors_total", 'Errors, by "kind"\\class\nsecond line',
                             labelnames=("kind",))
    errors.inc(kind='say "hi"\\ now\nplease')
    assert metrics.render() == (
        # HELP escapes backslash and newline only; a label value also the double quote.
        '# HELP errors_total Errors, by "kind"\\\\class\\nsecond line\n'
        "# TYPE errors_total counter\n"
        'errors_total{kind="say \\"hi\\"\\\\ now\\nplease"} 1\n'
    )


def test_unicode_label_values_pass_through() -> None:
    metrics = Metrics()
    metrics.counter("envs_total", "Envs.", labelnames=("env",)).inc(env="CartPole-ü-猫")
    assert 'envs_total{env="CartPole-ü-猫"} 1\n' in metrics.render()


def test_gauge_set_inc_dec() -> None:
    metrics = Metrics()
    sessions = metrics.gauge("sessions_open", "Sessions open.")
    sessions.set(5)
    sessions.inc()
    sessions.dec(3)
    assert sessions.value() == 3
    by_backend = metrics.gauge("envs_alive", "Sub-envs alive.", labelnames=("backend",))
    by_backend.set(-1.5, backend="thread")
    by_backend.dec(backend="process")
    assert metrics.render() == (
        "# HELP sessions_open Sessions open.\n"
        "# TYPE sessions_open gauge\n"
        "sessions_open 3\n"
        "# HELP envs_alive Sub-envs alive.\n"
        "# TYPE envs_alive gauge\n"
        'envs_alive{backend="thread"} -1.5\n'
        'envs_alive{backend="process"} -1\n'
    )


def test_gauge_read_at_render_time() -> None:
    sessions: list[str] = []
    metrics = Metrics()
    gauge = metrics.gauge("sessions", "Sessions.", read=lambda: len(sessions))
    assert metrics.render().endswith("sessions 0\n")
    sessions += ["a", "b"]
    assert metrics.render().endswith("sessions 2\n")
    assert gauge.value() == 2
    with pytest.raises(TypeError, match="read from a callable"):
        gauge.set(1)
    with pytest.raises(TypeError, match="read from a callable"):
        gauge.inc()
    with pytest.raises(ValueError, match="cannot have labels"):
        Gauge("g", "G.", labelnames=("a",), read=lambda: 1.0)


def test_gauge_read_errors_propagate() -> None:
    metrics = Metrics()
    metrics.gauge("broken", "Broken.", read=lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        metrics.render()


def test_histogram_cumulative_buckets_sum_count() -> None:
    metrics = Metrics()
    latency = metrics.histogram("step_seconds", "Step latency.", buckets=(0.01, 0.1, 1))
    for value in (0.005, 0.01, 0.05, 0.1, 0.1, 0.5, 3.0):
        latency.observe(value)
    # le is "less than or equal": 0.01 and 0.1 fall in their own buckets.
    assert metrics.render() == (
        "# HELP step_seconds Step latency.\n"
        "# TYPE step_seconds histogram\n"
        'step_seconds_bucket{le="0.01"} 2\n'
        'step_seconds_bucket{le="0.1"} 5\n'
        'step_seconds_bucket{le="1"} 6\n'
        'step_seconds_bucket{le="+Inf"} 7\n'
        "step_seconds_sum 3.765\n"
        "step_seconds_count 7\n"
    )


def test_histogram_empty_and_labelled() -> None:
    metrics = Metrics()
    plain = metrics.histogram("a_seconds", "A.", buckets=(1,))
    labelled = metrics.histogram("b_seconds", "B.", buckets=(1, 2), labelnames=("op",))
    labelled.observe(1.5, op="step")
    labelled.observe(7, op="reset")
    assert plain.buckets == (1.0,)
    assert metrics.render() == (
        "# HELP a_seconds A.\n"
        "# TYPE a_seconds histogram\n"
        'a_seconds_bucket{le="1"} 0\n'
        'a_seconds_bucket{le="+Inf"} 0\n'
        "a_seconds_sum 0\n"
        "a_seconds_count 0\n"
        "# HELP b_seconds B.\n"
        "# TYPE b_seconds histogram\n"
        'b_seconds_bucket{op="step",le="1"} 0\n'
        'b_seconds_bucket{op="step",le="2"} 1\n'
        'b_seconds_bucket{op="step",le="+Inf"} 1\n'
        'b_seconds_sum{op="step"} 1.5\n'
        'b_seconds_count{op="step"} 1\n'
        'b_seconds_bucket{op="reset",le="1"} 0\n'
        'b_seconds_bucket{op="reset",le="2"} 0\n'
        'b_seconds_bucket{op="reset",le="+Inf"} 1\n'
        'b_seconds_sum{op="reset"} 7\n'
        'b_seconds_count{op="reset"} 1\n'
    )


def test_histogram_special_observations() -> None:
    histogram = Histogram("h", "H.", buckets=(0, 1))
    for value in (-math.inf, -1, 0, math.inf, math.nan):
        histogram.observe(value)
    lines = histogram.render().splitlines()[2:]
    # NaN is counted in +Inf only (as Prometheus's Go client does), not in the first bucket.
    assert lines == ['h_bucket{le="0"} 3', 'h_bucket{le="1"} 3', 'h_bucket{le="+Inf"} 5',
                     "h_sum NaN", "h_count 5"]


def test_histogram_many_observations_match_a_reference() -> None:
    buckets = DEFAULT_LATENCY_BUCKETS
    histogram = Histogram("lat_seconds", "Latency.")
    values = [((i * 7919) % 20011) / 1000.0 for i in range(5000)]  # 0 .. 20 s, spread out
    for value in values:
        histogram.observe(value)
    counts = {line.split("le=")[1].split("}")[0].strip('"'): int(line.split()[-1])
              for line in histogram.render().splitlines() if "_bucket" in line}
    for bound in buckets:
        assert counts[format_value(bound)] == sum(value <= bound for value in values)
    assert counts["+Inf"] == len(values)


def test_histogram_buckets_checked() -> None:
    with pytest.raises(ValueError, match="increase"):
        Histogram("h", "H.", buckets=(1, 0.5))
    with pytest.raises(ValueError, match="increase"):
        Histogram("h", "H.", buckets=(1, 1))
    with pytest.raises(ValueError, match="finite"):
        Histogram("h", "H.", buckets=(1, math.nan))
    with pytest.raises(ValueError, match="at least one"):
        Histogram("h", "H.", buckets=())
    with pytest.raises(ValueError, match="reserves"):
        Histogram("h", "H.", labelnames=("le",))
    # A trailing +Inf is accepted and not doubled.
    text = Histogram("h", "H.", buckets=(1, math.inf)).render()
    assert text.count('le="+Inf"') == 1


def test_default_latency_buckets_increase_and_span_env_steps() -> None:
    assert list(DEFAULT_LATENCY_BUCKETS) == sorted(set(DEFAULT_LATENCY_BUCKETS))
    assert DEFAULT_LATENCY_BUCKETS[0] <= 0.001 and DEFAULT_LATENCY_BUCKETS[-1] >= 10


@pytest.mark.parametrize(("value", "text"), [
    (0, "0"), (3, "3"), (3.0, "3"), (-2.0, "-2"), (-0.0, "0"), (1_000_000.0, "1000000"),
    (0.5, "0.5"), (0.0005, "0.0005"), (1e-07, "1e-07"), (1e20, "1e+20"), (2.5e-3, "0.0025"),
    (math.inf, "+Inf"), (-math.inf, "-Inf"), (math.nan, "NaN"), (0.1 + 0.2, "0.30000000000000004"),
])
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text
    if not math.isnan(value):
        assert float(text) == value  # what Prometheus reads back is the value itself


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "é", "a.b", "a\n"])
def test_invalid_metric_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid metric name"):
        Gauge(name, "help")


@pytest.mark.parametrize("name", ["a", "_a", "a:b", ":a", "A_9:z"])
def test_valid_metric_names(name: str) -> None:
    Gauge(name, "help")


@pytest.mark.parametrize("label", ["", "1a", "a-b", "a:b", "__reserved", "é"])
def test_invalid_label_names(label: str) -> None:
    with pytest.raises(ValueError, match="invalid label name"):
        Gauge("g", "G.", labelnames=(label,))


def test_duplicate_and_string_label_names() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        Gauge("g", "G.", labelnames=("a", "a"))
    with pytest.raises(ValueError, match="sequence of names"):
        Gauge("g", "G.", labelnames="route")


def test_counter_names_end_in_total() -> None:
    with pytest.raises(ValueError, match="_total"):
        Counter("requests", "Requests.")


def test_counters_only_go_up() -> None:
    counter = Counter("c_total", "C.")
    for amount in (-1, math.nan):
        with pytest.raises(ValueError, match="cannot go down"):
            counter.inc(amount)
    assert counter.value() == 0


def test_wrong_label_sets_are_refused() -> None:
    counter = Counter("c_total", "C.", labelnames=("route",))
    gauge = Gauge("g", "G.", labelnames=("a", "b"))
    histogram = Histogram("h", "H.", labelnames=("op",))
    unlabelled = Histogram("u", "U.")
    calls = [
        lambda: counter.inc(),
        lambda: counter.inc(path="/step"),
        lambda: counter.inc(route="/step", extra="x"),
        lambda: gauge.set(1, a="x"),
        lambda: gauge.dec(a="x", c="y"),
        lambda: histogram.observe(0.1),
        lambda: histogram.observe(0.1, route="step"),
        lambda: unlabelled.observe(0.1, op="step"),
        lambda: counter.value(),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="takes labels"):
            call()
    assert counter.render().splitlines()[2:] == []  # nothing half-made
    assert 'u_count 0' in unlabelled.render()


def test_label_values_must_be_strings() -> None:
    counter = Counter("c_total", "C.", labelnames=("env",))
    with pytest.raises(TypeError, match="must be a str"):
        counter.inc(env=3)  # type: ignore[arg-type]
    assert counter.render().splitlines()[2:] == []


def test_names_cannot_clash_in_a_registry() -> None:
    metrics = Metrics()
    metrics.histogram("step_seconds", "Steps.")
    with pytest.raises(ValueError, match="already taken"):
        metrics.gauge("step_seconds", "Again.")
    with pytest.raises(ValueError, match="already taken"):
        metrics.gauge("step_seconds_count", "A histogram's sample name.")
    metrics.counter("a_total", "A.")
    with pytest.raises(ValueError, match="already taken"):
        metrics.counter("a_total", "A again.")
    metrics.gauge("reset_seconds_sum", "A gauge first.")
    with pytest.raises(ValueError, match=r"\['reset_seconds_sum'\] already taken"):
        metrics.histogram("reset_seconds", "Then a histogram whose _sum it would be.")
    assert metrics.render().count("# TYPE") == 3


def test_register_returns_the_metric() -> None:
    metrics = Metrics()
    gauge = Gauge("g", "G.")
    assert metrics.register(gauge) is gauge
    gauge.set(1)
    assert metrics.render().endswith("g 1\n")


# A sample line: name, optional {label="value",...} with escapes, one space, a value.
_SAMPLE = re.compile(
    r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(?:\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*)\})?'
    r' (?P<value>\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda match: {"n": "\n"}.get(match[1], match[1]), value)


def _parse(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """A small reader of the text format: each family's type, and every sample."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"two TYPE lines for {name}"
            types[name] = kind
            continue
        match = _SAMPLE.fullmatch(line)
        assert match, f"not a sample line: {line!r}"
        labels = {key: _unescape(value) for key, value in _LABEL.findall(match["labels"] or "")}
        samples.append((match["name"], labels, float(match["value"])))
    return types, samples


def test_rendered_text_parses_back() -> None:
    metrics = Metrics()
    counter = metrics.counter("served_total", "Served.", labelnames=("route", "note"))
    counter.inc(route="/step", note='quote " backslash \\ newline \n end')
    counter.inc(5, route="/reset", note="")
    metrics.gauge("ratio", "Ratio.", read=lambda: math.nan)
    metrics.gauge("limit", "Limit.").set(math.inf)
    latency = metrics.histogram("lat_seconds", "Latency.", labelnames=("op",))
    for index in range(100):
        latency.observe(index / 10, op="step")
    types, samples = _parse(metrics.render())
    assert types == {"served_total": "counter", "ratio": "gauge", "limit": "gauge",
                     "lat_seconds": "histogram"}
    by_key = {(name, tuple(sorted(labels.items()))): value for name, labels, value in samples}
    assert by_key[("served_total", (("note", 'quote " backslash \\ newline \n end'),
                                    ("route", "/step")))] == 1
    assert by_key[("served_total", (("note", ""), ("route", "/reset")))] == 5
    assert math.isnan(by_key[("ratio", ())])
    assert by_key[("limit", ())] == math.inf
    assert by_key[("lat_seconds_count", (("op", "step"),))] == 100
    assert by_key[("lat_seconds_bucket", (("le", "+Inf"), ("op", "step")))] == 100
    assert by_key[("lat_seconds_sum", (("op", "step"),))] == pytest.approx(495)
    buckets = [value for name, labels, value in samples if name == "lat_seconds_bucket"]
    assert buckets == sorted(buckets)  # cumulative
    assert len(buckets) == len(DEFAULT_LATENCY_BUCKETS) + 1


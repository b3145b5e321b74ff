"""Summaries, targets and the Markdown report of a benchmark run (results/latest.json -> latest.md)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any

# (target name, server, endpoint label) in the order of the tables
HTTP_TARGETS: tuple[tuple[str, str, str], ...] = (
    ("bare", "bare", "GET /json (bare Starlette)"),
    ("echo", "echo", "POST /echo (auth + JSON, no core)"),
    ("disburse-FULL", "core-FULL", "POST /v1/disburse"),
    ("charge-FULL", "core-FULL", "POST /v1/collect/charge"),
    ("getref-FULL", "core-FULL", "GET /v1/collect/{reference}"),
    ("replay-FULL", "core-FULL", "POST /v1/disburse (idempotent replay)"),
    ("disburse-NORMAL", "core-NORMAL", "POST /v1/disburse"),
    ("charge-NORMAL", "core-NORMAL", "POST /v1/collect/charge"),
    ("getref-NORMAL", "core-NORMAL", "GET /v1/collect/{reference}"),
    ("replay-NORMAL", "core-NORMAL", "POST /v1/disburse (idempotent replay)"),
    ("disburse-PG", "core-PG", "POST /v1/disburse"),
    ("charge-PG", "core-PG", "POST /v1/collect/charge"),
    ("getref-PG", "core-PG", "GET /v1/collect/{reference}"),
    ("replay-PG", "core-PG", "POST /v1/disburse (idempotent replay)"),
)
# the two-process round on PostgreSQL: (kind, endpoint); targets <kind>-PG-1p and <kind>-PG-2p
SPLIT_KINDS: tuple[tuple[str, str], ...] = (
    ("disburse", "POST /v1/disburse"),
    ("charge", "POST /v1/collect/charge"),
    ("getref", "GET /v1/collect/{reference}"),
    ("replay", "POST /v1/disburse (idempotent replay)"),
)


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise_http(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (target, concurrency): medians over the rounds, and ratios to the echo baseline
    of the same round and concurrency."""
    echo = {(r["round"], r["concurrency"]): r["result"]["rps"] for r in runs if r["target"] == "echo"}
    rows: list[dict[str, Any]] = []
    levels = sorted({r["concurrency"] for r in runs})
    for name, server, endpoint in HTTP_TARGETS:
        for level in levels:
            mine = [r for r in runs if r["target"] == name and r["concurrency"] == level]
            if not mine:
                continue
            results = [r["result"] for r in mine]
            ratios = [
                r["result"]["rps"] / echo[(r["round"], level)] for r in mine if echo.get((r["round"], level))
            ]
            rows.append(
                {
                    "target": name,
                    "server": server,
                    "endpoint": endpoint,
                    "concurrency": level,
                    "rounds": len(mine),
                    "rps": _spread([x["rps"] for x in results]),
                    "p50_ms": statistics.median(x["p50_ms"] for x in results),
                    "p99_ms": _spread([x["p99_ms"] for x in results]),
                    "max_ms": max(x["max_ms"] for x in results),
                    "ratio_to_echo": _spread(ratios) if ratios else None,
                    "requests": sum(x["requests"] for x in results),
                }
            )
    return rows


def summarise_split(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The two-process round: per endpoint and concurrency, one process against two (both loaded by the
    same load split over two generators), and the ratio two / one of the same round."""

    def side(mine: list[dict[str, Any]]) -> dict[str, Any]:
        results = [r["result"] for r in mine]
        return {
            "rounds": len(mine),
            "rps": _spread([x["rps"] for x in results]),
            "p50_ms": statistics.median(x["p50_ms"] for x in results),
            "p99_ms": _spread([x["p99_ms"] for x in results]),
            "requests": sum(x["requests"] for x in results),
        }

    rows: list[dict[str, Any]] = []
    levels = sorted({r["concurrency"] for r in runs if r["target"].endswith("-PG-2p")})
    for kind, endpoint in SPLIT_KINDS:
        for level in levels:
            one = [r for r in runs if r["target"] == f"{kind}-PG-1p" and r["concurrency"] == level]
            two = [r for r in runs if r["target"] == f"{kind}-PG-2p" and r["concurrency"] == level]
            if not one or not two:
                continue
            by_round = {r["round"]: r["result"]["rps"] for r in one}
            ratios = [r["result"]["rps"] / by_round[r["round"]] for r in two if by_round.get(r["round"])]
            rows.append(
                {
                    "kind": kind,
                    "endpoint": endpoint,
                    "concurrency": level,
                    "one_process": side(one),
                    "two_processes": side(two),
                    "ratio_two_to_one": _spread(ratios) if ratios else None,
                }
            )
    return rows


def _row(rows: list[dict[str, Any]], target: str, level: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["target"] == target and r["concurrency"] == level), None)


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with what was measured in this run and whether it is met.

    A target whose measurement did not run (a concurrency left out, a part skipped) is reported as
    not measured (``met`` None).
    """
    targets: list[dict[str, Any]] = []

    def add(name: str, goal: str, value: float | None, met: bool | None, shown: str) -> None:
        targets.append({"target": name, "goal": goal, "value": value, "met": met, "measured": shown})

    if "http" in results:
        _http_targets(results["http"].get("summary", []), add)
    for item in results.get("inprocess", {}).get("payouts", []):
        per_batch = item["ratio_per_batch"]
        add(
            f"core payout creation vs raw sqlite3 ({item['synchronous']})",
            ">= 0.85x",
            item["ratio"],
            item["ratio"] >= 0.85,
            f"{item['ratio']:.3f}x (batches {per_batch['min']:.3f}-{per_batch['max']:.3f})",
        )
    growth = results.get("growth", {})
    records = growth.get("records")
    if records:
        for what, label in (("get", "GET by reference"), ("payout", "payout creation")):
            part = records[what]
            add(
                f"{label}: {part['large_rows']:,} vs {part['small_rows']:,} records",
                "<= 1.2x",
                part["ratio"],
                part["ratio"] <= 1.2,
                _cost(part),
            )
    windows = growth.get("windows")
    if windows:
        part = windows["payout"]
        add(
            f"payout creation: {part['large_rows']:,} vs {part['small_rows']:,} payouts in the windows",
            "<= 1.2x",
            part["ratio"],
            part["ratio"] <= 1.2,
            _cost(part),
        )
    bulk = results.get("bulk")
    if bulk:
        latency = bulk["batch_latency_s"]
        add(
            f"POST /v1/disburse/bulk of {bulk['batch']:,} items answered (FULL)",
            "<= 1 s",
            latency["median"],
            latency["max"] <= 1.0,
            f"{latency['median']:.2f} s median, {latency['max']:.2f} s max over {latency['count']} requests",
        )
        ratio = bulk["ratio"]
        add(
            f"payouts/s through bulk requests vs POST /v1/disburse at c={bulk['single_concurrency']} (FULL)",
            ">= 5x",
            ratio["median"],
            ratio["median"] >= 5,
            f"{ratio['median']:.1f}x (rounds {ratio['min']:.1f}-{ratio['max']:.1f}; "
            f"{bulk['bulk_payouts_per_s']:.0f} vs {bulk['single_payouts_per_s']:.0f} payouts/s)",
        )
    memory = results.get("memory")
    if memory:
        add(
            f"server RSS after {memory['large_requests']:,} vs {memory['small_requests']:,} requests",
            "<= 1.1x",
            memory["ratio"],
            memory["ratio"] <= 1.1,
            f"{memory['ratio']:.3f}x ({memory['large_rss_mb']:.1f} vs {memory['small_rss_mb']:.1f} MB)",
        )
    if "onecore" in results:
        targets += onecore_targets(results["onecore"])
    return targets


Add = Callable[[str, str, float | None, bool | None, str], None]


def _http_targets(rows: list[dict[str, Any]], add: Add) -> None:
    row = _row(rows, "disburse-FULL", 32)
    ratio = row["ratio_to_echo"] if row else None
    if ratio:
        add(
            "POST /v1/disburse (FULL) vs echo, c=32",
            ">= 0.35x",
            ratio["median"],
            ratio["median"] >= 0.35,
            f"{ratio['median']:.3f}x (rounds {ratio['min']:.3f}-{ratio['max']:.3f})",
        )
    else:
        add("POST /v1/disburse (FULL) vs echo, c=32", ">= 0.35x", None, None, "not measured")
    for level, ceiling in ((32, 40.0), (128, 150.0)):
        row = _row(rows, "disburse-FULL", level)
        name = f"POST /v1/disburse (FULL) p99, c={level}"
        if row:
            p99 = row["p99_ms"]
            add(
                name,
                f"<= {ceiling:.0f} ms",
                p99["median"],
                p99["median"] <= ceiling,
                f"{p99['median']:.1f} ms (rounds {p99['min']:.1f}-{p99['max']:.1f})",
            )
        else:
            add(name, f"<= {ceiling:.0f} ms", None, None, "not measured")


# the one-core part (benchmarks/bench_one_core.py): target name -> endpoint, and its baseline's name
ONECORE_ENDPOINTS = {
    "disburse": ("POST /v1/disburse", "echo"),
    "getpayout": ("GET /v1/disburse/{reference}", "bare GET"),
    "getref": ("GET /v1/collect/{reference}", "bare GET"),
}


def onecore_targets(part: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 27's targets ("One core, batched") against the one-core part's figures."""
    targets: list[dict[str, Any]] = []

    def add(name: str, goal: str, value: float | None, met: bool | None, shown: str) -> None:
        targets.append(
            {"target": f"one core: {name}", "goal": goal, "value": value, "met": met, "measured": shown}
        )

    rows: list[dict[str, Any]] = part.get("summary", [])

    def ratio(target: str, floor: float) -> None:
        endpoint, baseline = ONECORE_ENDPOINTS[target]
        name, goal = f"{endpoint} vs {baseline}, c=32", f">= {floor:g}x"
        row = _row(rows, target, 32)
        spread = row["ratio"] if row else None
        if not spread:
            add(name, goal, None, None, "not measured")
            return
        add(
            name,
            goal,
            spread["median"],
            spread["median"] >= floor,
            f"{spread['median']:.3f}x (rounds {spread['min']:.3f}-{spread['max']:.3f}; "
            f"{row['rps']['median']:,.0f} req/s)"
            if row
            else "",
        )

    def p99(target: str, level: int, ceiling: float) -> None:
        name, goal = f"{ONECORE_ENDPOINTS[target][0]} p99, c={level}", f"<= {ceiling:g} ms"
        row = _row(rows, target, level)
        if not row:
            add(name, goal, None, None, "not measured")
            return
        spread = row["p99_ms"]
        add(
            name,
            goal,
            spread["median"],
            spread["median"] <= ceiling,
            f"{spread['median']:.1f} ms (rounds {spread['min']:.1f}-{spread['max']:.1f})",
        )

    ratio("disburse", 0.15)
    p99("disburse", 32, 40)
    background = next((b for b in part.get("background", []) if b["concurrency"] == 32), None)
    name, goal = "background work finished after each c=32 POST window (x the window)", "<= 0.3x"
    if background is None:
        add(name, goal, None, None, "not measured")
    elif background["drain_ratio"] is None or background["undrained_windows"]:
        add(name, goal, None, False, f"{background['undrained_windows']} window(s) not drained")
    else:
        drain, seconds = background["drain_ratio"], background["drain_s"]
        add(
            name,
            goal,
            drain["max"],
            drain["max"] <= 0.3,
            f"worst {drain['max']:.2f}x, median {drain['median']:.2f}x "
            f"({seconds['median']:.2f} s, {seconds['min']:.2f}-{seconds['max']:.2f} s)",
        )
    for target in ("getpayout", "getref"):
        ratio(target, 0.4)
        p99(target, 32, 15)
    for target in ("disburse", "getpayout", "getref"):
        p99(target, 128, 150)
    inproc = part.get("inprocess")
    name, goal = "payout created in-process vs a raw sqlite3 transaction (FULL)", ">= 0.85x"
    if inproc:
        per_batch = inproc["ratio_per_batch"]
        add(
            name,
            goal,
            inproc["ratio"],
            inproc["ratio"] >= 0.85,
            f"{inproc['ratio']:.3f}x (batches {per_batch['min']:.3f}-{per_batch['max']:.3f})",
        )
    else:
        add(name, goal, None, None, "not measured")
    return targets


def _cost(part: dict[str, Any]) -> str:
    large, small = part["large_us"]["median"], part["small_us"]["median"]
    return f"{part['ratio']:.2f}x ({large:.0f} vs {small:.0f} us)"


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _met(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[met]


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    postgres = meta.get("postgres", "not run")
    shown = postgres if postgres.startswith("PostgreSQL") else f"PostgreSQL rounds {postgres}"
    out: list[str] = [
        f"Run {meta['started']} ({'quick' if meta['quick'] else 'full'}), {meta['machine']}; "
        f"Python {meta['python']}, SQLite {meta['sqlite']}, {shown}, uvicorn {meta['uvicorn']} "
        f"({meta['uvicorn_loop']} + {meta['uvicorn_http']}); load: {meta['load_generator']}; "
        f"{meta['duration_s']:.0f} s.",
        "",
    ]
    gate = results.get("gate", {})
    out.append(
        f"**Correctness gate: {'passed' if gate.get('passed') else 'FAILED'}** "
        f"({sum(1 for c in gate.get('checks', []) if c['ok'])}/{len(gate.get('checks', []))} checks)."
    )
    out.append("")
    out += _table(
        ["target", "goal", "measured", ""],
        ([t["target"], t["goal"], t["measured"], _met(t["met"])] for t in results.get("targets", [])),
    )
    http = results.get("http")
    if http:
        out += [
            "",
            f"HTTP: {http['rounds']} interleaved round{'s' if http['rounds'] != 1 else ''} of "
            f"{http['duration_s']:g} s per run; medians over rounds; x echo = requests/s over the echo "
            "baseline's in the same round and concurrency (median [min-max]).",
            "",
        ]
        rows = []
        for r in http["summary"]:
            ratio = r["ratio_to_echo"]
            rows.append(
                [
                    r["endpoint"],
                    r["server"],
                    str(r["concurrency"]),
                    f"{r['rps']['median']:,.0f}",
                    _ms(r["p50_ms"]),
                    _ms(r["p99_ms"]["median"]),
                    _ms(r["max_ms"]),
                    "-"
                    if ratio is None
                    else f"{ratio['median']:.2f} [{ratio['min']:.2f}-{ratio['max']:.2f}]",
                ]
            )
        out += _table(["endpoint", "server", "c", "req/s", "p50 ms", "p99 ms", "max ms", "x echo"], rows)
        split = http.get("split") or []
        if split:
            out += [
                "",
                "PostgreSQL, two API processes on one database against one process: the same load split over "
                "two generators in both cases (one per process, or both on the one process); req/s add up, "
                "p99 is the slower generator's; x one = two processes' req/s over one process's in the same "
                "round (median [min-max]).",
                "",
            ]
            rows = []
            for r in split:
                ratio = r["ratio_two_to_one"]
                one, two = r["one_process"], r["two_processes"]
                rows.append(
                    [
                        r["endpoint"],
                        str(r["concurrency"]),
                        f"{one['rps']['median']:,.0f}",
                        _ms(one["p99_ms"]["median"]),
                        f"{two['rps']['median']:,.0f}",
                        _ms(two["p99_ms"]["median"]),
                        "-"
                        if ratio is None
                        else f"{ratio['median']:.2f} [{ratio['min']:.2f}-{ratio['max']:.2f}]",
                    ]
                )
            out += _table(
                ["endpoint", "c", "1 process req/s", "p99 ms", "2 processes req/s", "p99 ms", "x one"], rows
            )
        sustained = http.get("sustained", {})
        if sustained.get("runs"):
            out += [
                "",
                f"Sustained POST /v1/disburse (FULL), c={sustained['concurrency']}, one key, consecutive "
                f"{sustained['seconds_per_run']:g} s runs (req/s / p99 ms): "
                + ", ".join(f"{r['rps']:,.0f} / {r['p99_ms']:.0f}" for r in sustained["runs"])
                + ".",
            ]
        profiles = http.get("profiles", {})
        gil = profiles.get("gil")
        if gil and gil.get("samples"):
            out += [
                "",
                "py-spy, FULL server under POST /v1/disburse at c=32, samples holding the GIL "
                f"({gil['samples']:,}); own time by line:",
                "",
            ]
            out += _table(
                ["share", "function (file:line)"],
                ([f"{row['share'] * 100:.1f}%", row["function"]] for row in gil["own"][:10]),
            )
    inproc = results.get("inprocess")
    if inproc:
        out += ["", "In-process (one thread, sequential):", ""]
        rows = []
        for item in inproc.get("payouts", []):
            rows.append(
                [
                    f"payout creation, synchronous={item['synchronous']}",
                    f"{item['core_per_s']['median']:,.0f}/s",
                    f"{item['raw_per_s']['median']:,.0f}/s (raw sqlite3)",
                    f"{item['ratio']:.2f}",
                ]
            )
        signing = inproc.get("signing")
        if signing:
            rows.append(
                [
                    f"webhook signature, {signing['body_bytes']}-byte body",
                    f"{signing['signature_per_s']['median']:,.0f}/s",
                    f"{signing['hmac_digest_per_s']['median']:,.0f}/s (hmac.digest)",
                    f"{signing['ratio']:.2f}",
                ]
            )
        out += _table(["what", "ours", "baseline", "ratio"], rows)
    growth = results.get("growth")
    if growth:
        out += ["", f"Growth (in-process, synchronous={growth['synchronous']}; median cost per call):", ""]
        rows = []
        records = growth.get("records")
        if records:
            for what, label in (("get", "GET by reference"), ("payout", "payout creation")):
                part = records[what]
                rows.append(
                    [
                        label,
                        f"{part['small_rows']:,} records: {part['small_us']['median']:.0f} us",
                        f"{part['large_rows']:,} records: {part['large_us']['median']:.0f} us",
                        f"{part['ratio']:.2f}",
                    ]
                )
        windows = growth.get("windows")
        if windows:
            part = windows["payout"]
            rows.append(
                [
                    "payout creation with per_day/per_week limits",
                    f"{part['small_rows']:,} in windows: {part['small_us']['median']:.0f} us",
                    f"{part['large_rows']:,} in windows: {part['large_us']['median']:.0f} us",
                    f"{part['ratio']:.2f}",
                ]
            )
        out += _table(["what", "small", "large", "ratio"], rows)
        if windows and windows.get("profile_large"):
            out += ["", "cProfile, payout creation with the large windows (own time per payout):", ""]
            out += _table(
                ["own us", "calls", "function"],
                (
                    [f"{row['own_us_per_op']:.0f}", f"{row['calls_per_op']:g}", row["function"]]
                    for row in windows["profile_large"][:6]
                ),
            )
    bulk = results.get("bulk")
    if bulk:
        inproc = bulk.get("inprocess")
        out += [
            "",
            "Bulk payouts (one server, synchronous=FULL, no worker; "
            f"{len(bulk['runs'])} interleaved rounds): POST /v1/disburse at c={bulk['single_concurrency']} "
            f"for {bulk['single_seconds_per_round']:g} s, then {bulk['bulk_requests_per_round']} "
            f"POST /v1/disburse/bulk of {bulk['batch']:,} items one after the other.",
            "",
        ]
        out += _table(
            ["round", "single payouts/s", "bulk payouts/s", "x single", "bulk request ms (each)"],
            (
                [
                    str(number),
                    f"{run['single_payouts_per_s']:.0f}",
                    f"{run['bulk']['payouts_per_s']:.0f}",
                    f"{run['ratio']:.1f}",
                    ", ".join(f"{seconds * 1000:.0f}" for seconds in run["bulk"]["latency_s"]),
                ]
                for number, run in enumerate(bulk["runs"], start=1)
            ),
        )
        if inproc:
            out += [
                "",
                f"In-process core.disburse.create_bulk of {inproc['items']:,} items (FULL): "
                + ", ".join(f"{seconds * 1000:.0f} ms" for seconds in inproc["seconds"])
                + ".",
            ]
    memory = results.get("memory")
    if memory:
        out += [
            "",
            f"Memory (core server, synchronous={memory['synchronous']}, c={memory['concurrency']}, "
            "a third each of payouts, charges and reads): "
            + ", ".join(
                f"{s['requests']:,} requests: {s['rss_mb']:.1f} MB RSS ({s['threads']} threads)"
                for s in memory["samples"]
            )
            + f"; ratio {memory['ratio']:.3f}.",
        ]
    onecore = results.get("onecore")
    if onecore:
        out += _onecore_markdown(onecore)
    if not gate.get("passed", False):
        out += ["", "Failed checks:", ""]
        out += [f"- {c['name']}: {c['detail']}" for c in gate.get("checks", []) if not c["ok"]]
    return "\n".join(out) + "\n"


def _onecore_markdown(part: dict[str, Any]) -> list[str]:
    pinned = (
        f"pinned to CPU {part['server_cpu']} (the load generator and the webhook receiver to CPU "
        f"{part['load_cpu']})"
        if part["pinned"]
        else "NOT pinned (fewer than two CPUs)"
    )
    out = [
        "",
        f"One core (issue 27): `{part['server_command']}`; every server {pinned}; "
        f"{part['rounds']} interleaved round{'s' if part['rounds'] != 1 else ''} of {part['duration_s']:g} s "
        "windows; medians over rounds; x base = req/s over the baseline's (echo for the POST, the bare GET "
        "for the GETs) in the same round and concurrency (median [min-max]); CPU = the loaded server's CPU "
        "time over the window (1.00 = its core saturated), idle = the other two servers' on the same CPU "
        "meanwhile; per CPU-s = answers per second of the server's own CPU time, and x base per CPU-s its "
        "ratio to the baseline's (what each server does with the CPU it got, whatever else ran there); "
        "CPU 0 / CPU 1 = the server's and the load's CPU as the kernel saw them: busy (any process, ours "
        "or not) + waiting for the disk, and stolen for other machines.",
        "",
    ]
    rows = []
    for r in part["summary"]:
        ratio = r["ratio"]
        busy = r.get("server_cpu_busy")
        rows.append(
            [
                r["endpoint"],
                str(r["concurrency"]),
                f"{r['rps']['median']:,.0f}",
                "-" if ratio is None else f"{ratio['median']:.3f} [{ratio['min']:.3f}-{ratio['max']:.3f}]",
                _ms(r["p50_ms"]),
                _ms(r["p99_ms"]["median"]),
                _ms(r["max_ms"]),
                "-" if r.get("per_cpu_s") is None else f"{r['per_cpu_s']:,.0f}",
                "-" if not r.get("ratio_per_cpu_s") else f"{r['ratio_per_cpu_s']['median']:.3f}",
                "-" if busy is None else f"{busy:.2f}",
                "-" if r.get("idle_servers_cpu_busy") is None else f"{r['idle_servers_cpu_busy']:.2f}",
                _cpu(r.get("cpus") or {}, "server"),
                _cpu(r.get("cpus") or {}, "load"),
            ]
        )
    out += _table(
        [
            "endpoint",
            "c",
            "req/s",
            "x base",
            "p50 ms",
            "p99 ms",
            "max ms",
            "per CPU-s",
            "x base per CPU-s",
            "CPU",
            "idle",
            "CPU 0",
            "CPU 1",
        ],
        rows,
    )
    out += [
        "",
        "The background work after each POST /v1/disburse window: from the window's end until every payout "
        "is PAID and every webhook delivered (drain, and x the window); end to end = the window's payouts "
        "over the window plus the drain; backlog = payouts unpaid / events undelivered at the window's end; "
        "PAID = when the last payout was PAID (deliveries may still be on the way then).",
        "",
    ]
    rows = []
    for run in part["runs"]:
        bg = run.get("background")
        if not bg:
            continue
        backlog = bg["backlog_at_end"]
        rows.append(
            [
                str(run["round"] + 1),
                str(run["concurrency"]),
                f"{bg['api_payouts_per_s']:,.0f}",
                f"{backlog['payouts_unpaid']:,} / {backlog['events_pending']:,}",
                "-" if bg.get("paid_s") is None else f"{bg['paid_s']:.2f} s",
                "not drained" if not bg["drained"] else f"{bg['drain_s']:.2f} s",
                "-" if bg["drain_ratio"] is None else f"{bg['drain_ratio']:.2f}",
                "-" if bg["end_to_end_per_s"] is None else f"{bg['end_to_end_per_s']:,.0f}",
                f"{run['server_cpu_busy']:.2f} / {bg['server_cpu_drain_s'] / bg['drain_s']:.2f}"
                if bg["drained"] and bg["drain_s"]
                else f"{run['server_cpu_busy']:.2f}",
            ]
        )
    out += _table(
        [
            "round",
            "c",
            "accepted/s",
            "backlog at end",
            "PAID after",
            "drain",
            "x window",
            "end to end/s",
            "CPU load / drain",
        ],
        rows,
    )
    inproc = part.get("inprocess")
    if inproc:
        out += [
            "",
            f"In-process, synchronous={inproc['synchronous']}: core.disburse.create "
            f"{inproc['core_per_s']['median']:,.0f}/s against a raw sqlite3 transaction "
            f"{inproc['raw_per_s']['median']:,.0f}/s: {inproc['ratio']:.3f}x.",
        ]
    profiles = part.get("profiles") or {}
    if profiles.get("skipped"):
        out += ["", f"py-spy: skipped ({profiles['skipped']})."]
    for mode in ("gil-load", "gil-drain", "active-load"):
        spy = profiles.get(mode)
        if not spy or not spy.get("samples"):
            continue
        threads = ", ".join(f"{t['thread']} {t['share'] * 100:.0f}%" for t in spy["threads"][:6])
        out += [
            "",
            f"py-spy, {spy['what']} ({spy['samples']:,} samples; by thread: {threads}); own time by line:",
            "",
        ]
        out += _table(
            ["share", "function (file:line)"],
            ([f"{row['share'] * 100:.1f}%", row["function"]] for row in spy["own"][:10]),
        )
    return out


def _cpu(cpus: dict[str, float], side: str) -> str:
    """'busy+iowait (st steal)' of one CPU, e.g. '0.97+0.01 (st 0.02)'; '-' when not measured."""
    if f"{side}_busy" not in cpus:
        return "-"
    return f"{cpus[f'{side}_busy']:.2f}+{cpus[f'{side}_iowait']:.2f} (st {cpus[f'{side}_steal']:.2f})"

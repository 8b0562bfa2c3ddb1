"""``tokenfleet usage``: usage you can bill from, and with ``--cost`` what it cost.

Reads the gateways' usage ledger in Redis (layout: :mod:`tokenfleet.accounting.usage_layout`):
``--redis``, or found through the cluster with the kubeconfig alone
(:mod:`tokenfleet.devstack.ledger_discovery`).
For cost, the pools' ``spec.cost`` (from the cluster, or ``--price``) and their GPU-hours (ready
workers from Prometheus hour by hour, or ``--ready-gpus``), then the allocation rule of
:mod:`tokenfleet.accounting.cost` hour by hour and pool by pool. ``--plot`` draws cost per
tenant per hour. It lives in the devstack root because it joins parts no lower layer may join: the
gateway's Redis client, and Prometheus.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import datetime
import io
import json
import os
import re
import sys
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokenfleet.accounting import cost, usage_layout
from tokenfleet.api.base import from_rfc3339
from tokenfleet.devstack import chart, ledger_address, ledger_discovery
from tokenfleet.gateway import redis_client, usage_ledger

UTC = datetime.UTC
Hours = list[tuple[datetime.datetime, list[usage_layout.Entry]]]


def parse_since(text: str) -> datetime.timedelta:
    """``24h``, ``7d``, ``90m`` → a duration; ValueError otherwise."""
    match = re.fullmatch(r"(\d+)([mhd])", text.strip())
    if match is None:
        raise ValueError(f"--since wants a duration like 24h, 7d or 90m, not {text!r}")
    n, unit = int(match[1]), match[2]
    return datetime.timedelta(**{{"m": "minutes", "h": "hours", "d": "days"}[unit]: n})


def usage_rows(hours: Hours, *, tenant: str = "") -> list[usage_layout.Entry]:
    """Entries summed over the window (one tenant's, or everyone's)."""
    # fields() of an hour's distinct entries never collide; entries() sums across hours
    rows = usage_layout.entries(
        dict(f for e in entries for f in usage_layout.fields(e)) for _, entries in hours
    )
    return [r for r in rows if not tenant or r.tenant == tenant]


def cost_lines(
    hours: Hours,
    *,
    prices: Mapping[str, cost.PoolPrice],
    gpu_hours: Mapping[tuple[str, datetime.datetime], float],
) -> list[tuple[datetime.datetime, str, cost.CostLine]]:
    """(hour, pool, line) for every hour and priced pool: the allocation rule, hour by hour."""
    out: list[tuple[datetime.datetime, str, cost.CostLine]] = []
    pools_by_hour: dict[datetime.datetime, set[str]] = {}
    for (pool, hour), _ in gpu_hours.items():
        pools_by_hour.setdefault(hour, set()).add(pool)
    entries_by_hour = dict(hours)
    for hour in sorted(set(entries_by_hour) | set(pools_by_hour)):
        entries = entries_by_hour.get(hour, [])
        for pool in sorted({e.pool for e in entries} | pools_by_hour.get(hour, set())):
            price = prices.get(pool)
            if price is None:
                continue  # unpriced pools stay out of cost reports (spec.cost unset)
            lines = cost.allocate(
                usage=[
                    cost.Usage(
                        tenant=e.tenant,
                        model=e.model,
                        outcome=e.outcome,
                        requests=e.requests,
                        prompt_tokens=e.prompt_tokens,
                        cached_prompt_tokens=e.cached_prompt_tokens,
                        completion_tokens=e.completion_tokens,
                    )
                    for e in entries
                    if e.pool == pool
                ],
                price=price,
                gpu_hours=gpu_hours.get((pool, hour), 0.0),
            )
            out.extend((hour, pool, line) for line in lines)
    return out


@dataclasses.dataclass(slots=True, kw_only=True)
class CostRow:
    """A report line summed over hours and pools."""

    tenant: str
    model: str
    outcome: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    gpu_hours: float = 0.0
    input_cost: float = 0.0
    output_cost: float = 0.0
    cost: float = 0.0

    def as_dict(self, currency: str) -> dict[str, object]:
        def per_m(c: float, t: int) -> float | None:
            return round(c * 1e6 / t, 6) if t else None

        return {
            "tenant": self.tenant,
            "model": self.model,
            "outcome": self.outcome,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "gpu_hours": round(self.gpu_hours, 4),
            "cost": round(self.cost, 4),
            "currency": currency,
            "per_million_input": per_m(self.input_cost, self.prompt_tokens),
            "per_million_output": per_m(self.output_cost, self.completion_tokens),
            "per_request": round(self.cost / self.requests, 6)
            if self.outcome == "served" and self.requests
            else None,
        }


def cost_rows(lines: Sequence[tuple[datetime.datetime, str, cost.CostLine]]) -> list[CostRow]:
    """Lines summed per (tenant, model, outcome); idle last."""
    rows: dict[tuple[str, str, str], CostRow] = {}
    for _, _, line in lines:
        row = rows.setdefault(
            (line.tenant, line.model, line.outcome),
            CostRow(tenant=line.tenant, model=line.model, outcome=line.outcome),
        )
        row.requests += line.requests
        row.prompt_tokens += line.prompt_tokens
        row.completion_tokens += line.completion_tokens
        row.gpu_hours += line.gpu_hours
        row.input_cost += (line.per_million_input or 0.0) * line.prompt_tokens / 1e6
        row.output_cost += (line.per_million_output or 0.0) * line.completion_tokens / 1e6
        row.cost += line.cost
    return sorted(
        rows.values(), key=lambda r: (r.tenant == cost.IDLE, r.tenant, r.model, r.outcome)
    )


def render(records: Sequence[Mapping[str, object]], fmt: str) -> str:
    """Records as an aligned table, JSON or CSV."""
    if fmt == "json":
        return json.dumps(list(records), indent=2)
    columns = list(records[0]) if records else ["tenant"]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
        return buf.getvalue()
    cells = [[_cell(r.get(c)) for c in columns] for r in records]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def parse_price(text: str) -> tuple[str, cost.PoolPrice]:
    """``NS/POOL=PER_GPU_HOUR[:GPUS[:PROMPT_TPS:OUTPUT_TPS]]`` → (pool, price)."""
    pool, _, spec = text.partition("=")
    parts = spec.split(":")
    if not pool or not spec or len(parts) not in (1, 2, 4):
        raise ValueError(
            f"--price wants NS/POOL=PER_GPU_HOUR[:GPUS[:PROMPT_TPS:OUTPUT_TPS]]: {text!r}"
        )
    numbers = [float(p) for p in parts] + [1.0, 0.0, 0.0][len(parts) - 1 :]
    return pool, cost.PoolPrice(
        per_gpu_hour=numbers[0],
        gpus_per_replica=int(numbers[1]),
        prompt_tokens_per_second=numbers[2],
        output_tokens_per_second=numbers[3],
    )


def hour_of(key: str) -> datetime.datetime:
    """The hour an hour hash counts (tf:u:h:YYYYMMDDHH)."""
    return datetime.datetime.strptime(key.rsplit(":", 1)[1], "%Y%m%d%H").replace(tzinfo=UTC)


async def read_hours(url: str, *, since: datetime.datetime, until: datetime.datetime) -> Hours:
    """The ledger's hour hashes in the window."""
    client = redis_client.RespClient(url, timeout=5)
    try:
        return [
            (hour_of(k), e) for k, e in await usage_ledger.read(client, since=since, until=until)
        ]
    finally:
        await client.close()


def ready_gpu_hours(
    prometheus: str,
    *,
    prices: Mapping[str, cost.PoolPrice],
    since: datetime.datetime,
    until: datetime.datetime,
) -> dict[tuple[str, datetime.datetime], float]:
    """GPU-hours per (pool, hour): the mean number of ready (scraped, up) workers of the pool
    in each hour × accelerators per replica."""
    query = 'avg_over_time((count by (namespace, pool) (up{job="vllm"} == 1))[1h:15s])'
    start = since.replace(minute=0, second=0, microsecond=0) + datetime.timedelta(hours=1)
    params = urllib.parse.urlencode(
        {"query": query, "start": start.timestamp(), "end": until.timestamp() + 3600, "step": 3600}
    )
    if not prometheus.startswith(("http://", "https://")):
        raise ValueError(f"--prometheus wants an http(s) URL, not {prometheus!r}")
    url = f"{prometheus}/api/v1/query_range?{params}"
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - http(s) checked above
        series = json.load(r)["data"]["result"]
    out = {}
    for s in series:
        pool = f"{s['metric'].get('namespace', '')}/{s['metric'].get('pool', '')}"
        gpus = prices[pool].gpus_per_replica if pool in prices else 1
        for at, value in s["values"]:  # the hour *ending* at ``at``
            hour = datetime.datetime.fromtimestamp(float(at), UTC) - datetime.timedelta(hours=1)
            out[(pool, hour)] = float(value) * gpus
    return out


def plot(
    lines: Sequence[tuple[datetime.datetime, str, cost.CostLine]], path: Path, currency: str
) -> None:
    """Stacked bars of cost per tenant per hour (idle on top) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = sorted({h for h, _, _ in lines})
    tenants = sorted({ln.tenant for _, _, ln in lines}, key=lambda t: (t == cost.IDLE, t))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bottom = [0.0] * len(hours)
    for tenant in tenants:
        heights = [
            sum(ln.cost for h2, _, ln in lines if h2 == h and ln.tenant == tenant) for h in hours
        ]
        ax.bar([h.strftime("%d %H:00") for h in hours], heights, bottom=bottom, label=tenant)
        bottom = [b + v for b, v in zip(bottom, heights, strict=True)]
    ax.set_ylabel(f"cost per hour ({currency})")
    ax.set_title("Cost per tenant per hour (warm idle capacity as its own line)")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line of ``tokenfleet usage``."""
    parser = argparse.ArgumentParser(prog="tokenfleet usage", description=__doc__)
    parser.add_argument("--since", default="24h", help="window: 90m, 24h, 7d")
    parser.add_argument("--tenant", default="", help="one tenant (namespace/name)")
    parser.add_argument("-o", "--output", choices=("table", "json", "csv"), default="table")
    parser.add_argument(
        "--redis",
        default=os.environ.get("TOKENFLEET_REDIS_URL", ""),
        help="the ledger's Redis URL (default: found through the cluster, see below)",
    )
    parser.add_argument("--kubeconfig", help="where to find the ledger from ($KUBECONFIG)")
    parser.add_argument("--context", help="the kubeconfig's context (its current one)")
    parser.add_argument(
        "-n",
        "--namespace",
        default=chart.NAMESPACE,
        help=f"where TokenFleet's gateway is installed ({chart.NAMESPACE})",
    )
    parser.add_argument("--cost", action="store_true", help="allocate the pools' GPU cost")
    parser.add_argument(
        "--price", action="append", default=[], metavar="NS/POOL=PRICE[:GPUS[:PTPS:OTPS]]"
    )
    parser.add_argument("--prometheus", default=os.environ.get("TOKENFLEET_PROMETHEUS_URL", ""))
    parser.add_argument(
        "--ready-gpus",
        action="append",
        default=[],
        metavar="NS/POOL=N",
        help="GPUs ready throughout the window, instead of --prometheus",
    )
    parser.add_argument("--until", default="", help="end of the window, RFC 3339 (now)")
    parser.add_argument("--plot", type=Path, help="PNG of cost per tenant per hour")
    return parser.parse_args(argv)


async def _ledger_hours(
    args: argparse.Namespace, *, since: datetime.datetime, until: datetime.datetime
) -> Hours:
    """The window's hours from the ledger wherever it is (ledger_discovery finds it)."""
    where = ledger_discovery.Where(
        redis=args.redis, kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace
    )
    async with ledger_discovery.ledger_url(where) as url:
        try:
            return await read_hours(url, since=since, until=until)
        except (OSError, TimeoutError, redis_client.RespError) as exc:  # NotSent is an OSError
            raise ledger_discovery.NotFound(
                f"the ledger at {ledger_address.redact(url)} did not answer: {exc}"
            ) from None


def main(argv: list[str]) -> int:
    """``tokenfleet usage``: parse, read the ledger (and prices, GPU-hours), print."""
    args = parse_args(argv)
    try:
        window = parse_since(args.since)
        prices = dict(parse_price(p) for p in args.price)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        until = from_rfc3339(args.until) if args.until else datetime.datetime.now(UTC)
    except ValueError:
        print(f"error: --until wants an RFC 3339 time, not {args.until!r}", file=sys.stderr)
        return 2
    since = until - window
    try:
        hours = asyncio.run(_ledger_hours(args, since=since, until=until))
    except ledger_discovery.NotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.cost:
        records = [dataclasses.asdict(r) for r in usage_rows(hours, tenant=args.tenant)]
        print(render(records, args.output))
        return 0
    gpu = _gpu_hours(args, prices=prices, since=since, until=until)
    lines = cost_lines(hours, prices=prices, gpu_hours=gpu)
    if args.tenant:
        lines = [x for x in lines if x[2].tenant in (args.tenant, cost.IDLE)]
    currency = next(iter(prices.values())).currency if prices else "USD"
    print(render([r.as_dict(currency) for r in cost_rows(lines)], args.output))
    if args.plot:
        plot(lines, args.plot, currency)
    return 0


def _gpu_hours(
    args: argparse.Namespace,
    *,
    prices: Mapping[str, cost.PoolPrice],
    since: datetime.datetime,
    until: datetime.datetime,
) -> dict[tuple[str, datetime.datetime], float]:
    if args.prometheus:
        return ready_gpu_hours(args.prometheus, prices=prices, since=since, until=until)
    out = {}
    for text in args.ready_gpus:
        pool, _, gpus = text.partition("=")
        for key in usage_layout.hour_keys(since, until):
            start = hour_of(key)
            end = start + datetime.timedelta(hours=1)
            overlap = (min(end, until) - max(start, since)).total_seconds() / 3600
            out[(pool, start)] = float(gpus) * max(0.0, overlap)
    return out

"""Rank 0's metrics page is untrusted input: the real operator reads at most 1 MiB of it, parses it
off its event loop, and writes only finite, bounded numbers to status (issue 14, bounded scraping)."""
import asyncio
import contextlib
import http.server
import json
import pathlib
import socket
import threading
import time
from typing import Self

import pytest
from kuberl.core import rank0metrics, safetext
from kuberl.operator import handlers

from tests.operator.operatorkit import (
    FakeMetrics,
    LocalServer,
    Operator,
    create_job,
    events,
    pods,
    start_gang,
    status,
    wait_for,
    wait_phase,
    wait_reconciles,
)
from tests.support.apiserver import StandinServer
from tests.support.ports import free_port

MIB = 1 << 20
LINE = b'kuberl_trainer_padding{rltj="hog",rank="0",filler="xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"} 1.0\n'


class Page(LocalServer):
    """Rank 0's /metrics as a hostile trainer would serve it: `size` bytes of valid samples after a
    step counter, streamed (chunked, no Content-Length, unless `declared`) so nothing is cheap to refuse."""

    def __init__(self, job: str, size: int, declared: bool = False, values: dict[str, str] | None = None):
        self.job, self.size, self.declared = job, size, declared
        self.values = values or {'env_steps_total': '640'}
        self.served = 0
        page = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def do_GET(self):
                page.served += 1
                head = page.head()
                self.send_response(200)
                self.send_header('Content-Type', 'text/plain; version=0.0.4')
                if page.declared:
                    self.send_header('Content-Length', str(page.size))
                else:
                    self.send_header('Transfer-Encoding', 'chunked')
                self.send_header('Connection', 'close')
                self.end_headers()
                block = LINE * (64 * 1024 // len(LINE))
                try:
                    self.write(head)
                    sent = len(head)
                    while sent < page.size:
                        left = page.size - sent
                        piece = block if left >= len(block) else b'#' * (left - 1) + b'\n'  # whole lines only
                        self.write(piece)
                        sent += len(piece)
                    if not page.declared:
                        self.wfile.write(b'0\r\n\r\n')
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the operator stopped reading: what it is meant to do

            def write(self, data: bytes) -> None:
                if page.declared:
                    self.wfile.write(data)
                else:
                    self.wfile.write(f'{len(data):x}\r\n'.encode() + data + b'\r\n')

            def log_message(self, *args):
                pass

        self.serve(Handler)

    def head(self) -> bytes:
        lines = []
        for suffix, value in self.values.items():
            lines += [f'# TYPE kuberl_trainer_{suffix} gauge', f'kuberl_trainer_{suffix}{{rltj="{self.job}",rank="0"}} {value}']
        return ('\n'.join(lines) + '\n# TYPE kuberl_trainer_padding gauge\n').encode()



def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
    raise AssertionError('no VmRSS')


def watch(operator: Operator, seconds: float) -> tuple[float, float]:
    """The slowest /healthz answer and the highest RSS (MiB) seen while the operator scrapes for `seconds`."""
    slowest, peak = 0.0, 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        assert operator.health_status(timeout=5) == 200
        slowest = max(slowest, time.monotonic() - started)
        peak = max(peak, rss_mib(operator.process.pid))
        time.sleep(0.05)
    return slowest, peak


def strict_json(status: dict) -> dict:
    """Status as a strict JSON reader (kubectl's) sees it: NaN and Infinity are not JSON."""
    def refuse(constant):
        raise AssertionError(f'{constant} in status')
    return json.loads(json.dumps(status), parse_constant=refuse)


@pytest.fixture
def scraping_operator(standin: StandinServer, tmp_path: pathlib.Path):
    op = Operator(standin, tmp_path).start()
    yield op
    op.stop()


@pytest.mark.parametrize('declared', [False, True], ids=['streamed', 'content-length'])
def test_a_150_mb_page_is_not_read_and_the_operator_stays_responsive_and_small(standin, rest, scraping_operator, declared):
    with Page('hog', 150 * 10**6, declared=declared) as page:
        create_job(rest, 'hog', workers=1, metrics={'port': page.port})
        start_gang(standin, 'hog', 1, ip='127.0.0.1')
        wait_phase(rest, 'hog', 'Running')
        wait_for(lambda: page.served >= 2, what='two scrapes of the big page')
        slowest, peak = watch(scraping_operator, 4.0)
        print(f'\n150 MB page ({"Content-Length" if declared else "chunked"}): {page.served} scrapes, '
              f'slowest /healthz {slowest * 1000:.0f} ms, peak RSS {peak:.0f} MiB')
        assert slowest < 1.0 and peak < 200
        assert 'progress' not in status(rest, 'hog') or not status(rest, 'hog')['progress'].get('timesteps')
        warning = wait_for(lambda: [e for e in events(rest, 'hog') if e['reason'] == 'MetricsTooLarge'], what='a MetricsTooLarge event')
        assert warning[0]['type'] == 'Warning' and f'{rank0metrics.MAX_PAGE_BYTES}-byte limit' in warning[0]['message']
        assert len(warning) == 1 and warning[0].get('count', 1) == 1, 'the same warning is not posted again at every scrape'
        refused = [line for line in scraping_operator.metrics().splitlines()
                   if line.startswith('kuberl_operator_metrics_pages_refused_total{reason="too_large"}')]
        assert refused and float(refused[0].split()[-1]) >= 2


def test_a_page_just_under_the_limit_is_read_off_the_event_loop(standin, rest, scraping_operator):
    with Page('full', rank0metrics.MAX_PAGE_BYTES - 1024, declared=True, values={'env_steps_total': '4096'}) as page:
        create_job(rest, 'full', workers=1, metrics={'port': page.port})
        start_gang(standin, 'full', 1, ip='127.0.0.1')
        wait_for(lambda: (status(rest, 'full').get('progress') or {}).get('timesteps') == 4096, what='progress from a 1 MiB page')
        slowest, peak = watch(scraping_operator, 4.0)
        print(f'\n1 MiB page: {page.served} scrapes, slowest /healthz {slowest * 1000:.0f} ms, peak RSS {peak:.0f} MiB')
        assert slowest < 1.0 and peak < 200


def test_non_finite_and_huge_values_never_reach_status(standin, rest, scraping_operator):
    values = {'env_steps_total': '1e300', 'steps_per_second': 'NaN', 'episode_return': '+Inf', 'eval_return': '-Inf',
              'success': 'NaN', 'last_checkpoint_timestamp_seconds': '1e300'}
    with Page('nan', 0, values=values) as page:
        create_job(rest, 'nan', workers=1, metrics={'port': page.port})
        start_gang(standin, 'nan', 1, ip='127.0.0.1')
        wait_phase(rest, 'nan', 'Running')
        wait_for(lambda: page.served >= 3, what='three scrapes')
        assert scraping_operator.healthy()
        seen = strict_json(status(rest, 'nan'))
        assert not (seen.get('progress') or {}).get('timesteps') and not seen.get('latestCheckpoint'), seen

        page.values = {'env_steps_total': '77', **{k: v for k, v in values.items() if k != 'env_steps_total'}}
        wait_for(lambda: (status(rest, 'nan').get('progress') or {}).get('timesteps') == 77, what='the finite step counter')
        progress = strict_json(status(rest, 'nan'))['progress']
        assert progress == {'timesteps': 77} or all(progress.get(k) is None for k in ('stepsPerSecond', 'episodeReturnMean', 'evalReturn'))
        assert 'latestCheckpoint' not in status(rest, 'nan')
        assert status(rest, 'nan')['phase'] == 'Running'


class Redirect(LocalServer):
    """Rank 0 answering every scrape with a redirect elsewhere: a tenant steering the operator's
    requests (and its network identity) at another service, past that service's NetworkPolicy."""

    def __init__(self, target: str):
        self.served = 0
        redirect = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                redirect.served += 1
                self.send_response(302)
                self.send_header('Location', target)
                self.send_header('Content-Length', '0')
                self.end_headers()

            def log_message(self, *args):
                pass

        self.serve(Handler)


def test_a_redirect_from_rank_0_is_not_followed(standin, rest, scraping_operator):
    with Page('elsewhere', 0, values={'env_steps_total': '999'}) as elsewhere, \
            Redirect(f'http://127.0.0.1:{elsewhere.port}/metrics') as rank0:
        create_job(rest, 'steer', workers=1, metrics={'port': rank0.port})
        start_gang(standin, 'steer', 1, ip='127.0.0.1')
        wait_phase(rest, 'steer', 'Running')
        wait_for(lambda: rank0.served >= 2, what='two scrapes of rank 0')
        assert elsewhere.served == 0, 'the operator followed rank 0 somewhere else'
        assert not (status(rest, 'steer').get('progress') or {}).get('timesteps')


class Silent:
    """Rank 0 that accepts every scrape and never answers (a stopped process, or a tenant who
    means it): each scrape lasts the operator's whole scrape timeout."""

    def __init__(self):
        self.listener = socket.create_server(('127.0.0.1', 0), backlog=256)
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.listener.accept()[0])

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()
        for held in self.held:
            held.close()
        self.thread.join(5)


def test_a_silent_rank_0_does_not_hold_a_reconcile_slot(standin, rest, tmp_path):
    """Scrapes used to run inside the reconcile slot: each silent rank 0 held one for the whole
    scrape timeout, so enough of them queued every other job's reconcile (96 of them, against the
    default 32 slots and 2 s, delayed a new job's pods by 4 s). Here one slot and a 60 s timeout
    make the old behaviour unmistakable: the other job's pods would wait for the scrape to give up."""
    op = Operator(standin, tmp_path, '--max-concurrent-reconciles', '1', '--scrape-timeout', '60', '--scrape-interval', '0.2').start()
    try:
        with Silent() as silent:
            create_job(rest, 'mute', workers=1, metrics={'port': silent.port})
            start_gang(standin, 'mute', 1, ip='127.0.0.1')
            wait_for(lambda: len(silent.held) >= 1, timeout=30, what='the silent rank 0 scraped')
            create_job(rest, 'quick', workers=2)
            wait_for(lambda: len(pods(standin, 'quick')) == 2, timeout=30, what='quick pods while the scrape of mute is held')
            assert len(silent.held) == 1, 'the first scrape of mute was still waiting (a second comes only after its timeout)'
    finally:
        op.stop()


def test_a_lent_reconcile_slot_is_taken_back_even_when_the_loop_is_cancelled():
    async def scenario(hold_others: bool) -> int:
        slots = asyncio.Semaphore(2)

        async def reconcile(inside: asyncio.Event) -> None:
            async with slots, handlers._slot_lent(slots):
                inside.set()
                await asyncio.sleep(3600)

        inside = asyncio.Event()
        task = asyncio.ensure_future(reconcile(inside))
        await inside.wait()
        if hold_others:  # every slot taken while the scrape waits: taking it back has to queue
            await slots.acquire()
            await slots.acquire()
        task.cancel()
        await asyncio.sleep(0.01)
        if hold_others:  # the others finish; the cancelled loop takes its slot back, then gives it up
            slots.release()
            slots.release()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        free = 0
        while not slots.locked():
            await slots.acquire()
            free += 1
        return free

    assert asyncio.run(scenario(hold_others=False)) == 2
    assert asyncio.run(scenario(hold_others=True)) == 2


class IPv6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def test_rank_0_on_an_ipv6_address_is_scraped(standin, rest, scraping_operator):
    """On an IPv6 cluster podIP is `fd00::5`: formatted into a URL without brackets it never parsed,
    and such a job showed no progress at all."""
    page = FakeMetrics('six')
    page.timesteps = 4242
    server = IPv6Server(('::1', 0), page.server.RequestHandlerClass)
    page.server.server_close()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        create_job(rest, 'six', workers=1, metrics={'port': server.server_address[1]})
        start_gang(standin, 'six', 1, ip='::1')
        wait_for(lambda: (status(rest, 'six').get('progress') or {}).get('timesteps') == 4242, what='progress from an IPv6 rank 0')
    finally:
        server.shutdown()
        server.server_close()


def test_a_rank_0_never_read_is_said_once_its_gang_ran_a_stall_timeout(standin, rest, scraping_operator):
    """Until rank 0 is first read the stall clock does not start: a rank 0 the operator cannot reach (here nothing
    listens on its metrics port; in a cluster a NetworkPolicy or a mesh's mutual TLS) ran on with no progress in
    status, never judged, and no word anywhere. A Warning Event (and a log line) now names the URL and the failure."""
    closed = free_port()
    create_job(rest, 'unread', workers=1, metrics={'port': closed}, runPolicy={'stallTimeoutSeconds': 2})
    start_gang(standin, 'unread', 1, ip='127.0.0.1')
    wait_phase(rest, 'unread', 'Running')
    said = wait_for(lambda: [e for e in events(rest, 'unread') if e['reason'] == 'MetricsUnread'],
                    what='the unread rank 0 to be said')
    assert len(said) == 1 and said[0]['type'] == 'Warning', said
    message = said[0]['message']
    assert message.startswith("generation 0: rank 0's metrics (http://127.0.0.1:") and f':{closed}/metrics)' in message, message
    assert 'stallTimeoutSeconds=2' in message and 'ClientConnectorError' in message, message
    assert "rank 0's metrics" in scraping_operator.log() and status(rest, 'unread')['phase'] == 'Running'
    wait_reconciles(scraping_operator, 3, 'three more scrapes, each failing')  # said once per generation
    assert len([e for e in events(rest, 'unread') if e['reason'] == 'MetricsUnread']) == 1


def test_a_rank_0_page_that_fails_to_parse_with_control_characters_reaches_the_operators_log_escaped(standin, rest, scraping_operator):
    """prometheus_client quotes the tenant's bad line raw (`Invalid labels: ESC[2J...`): that failure went into the
    operator's log, which every tenant's administrator reads, clearing their screen and forging a line of its own;
    the Event was escaped already."""
    page = FakeMetrics('rude')
    page.page = lambda: 'kuberl_trainer_env_steps_total{\x1b[2J\x07\r\u202e="x"}\t1\n'
    with page:
        create_job(rest, 'rude', workers=1, metrics={'port': page.port}, runPolicy={'stallTimeoutSeconds': 2})
        start_gang(standin, 'rude', 1, ip='127.0.0.1')
        said = wait_for(lambda: [e for e in events(rest, 'rude') if e['reason'] == 'MetricsUnread'],
                        what='the unread rank 0 to be said')
    assert 'Invalid labels: \\x1b[2J\\x07\\r\\u202e=' in said[0]['message'], said
    logged = [line for line in scraping_operator.log().splitlines() if "rank 0's metrics" in line]
    assert logged and 'Invalid labels: \\x1b[2J\\x07\\r\\u202e=' in logged[0] and not safetext.has_unsafe(logged[0]), logged

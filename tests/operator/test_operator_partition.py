"""An operator that never goes blind: a half-open partition between the operator and the API
server (tests.support.faultproxy: sockets stay ESTABLISHED, nothing arrives, no FIN, no RST)
ends within the watch bounds (`--watch-timeout` and what follows from it, operator_config.
WatchBounds), /healthz fails while the watches are silent past the bound, and a job created
after the partition heals gets its pods within the bound."""
import time

import yaml
from kuberl.operator.config import WatchBounds

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)
from tests.support.apiserver import kubeconfig
from tests.support.faultproxy import FaultProxy

WATCH_TIMEOUT = 2
BOUNDS = WatchBounds(WATCH_TIMEOUT)
PROBE_CACHE_SECONDS = 10.0  # kopf answers /healthz from probe results at most this old
# A loaded machine's room past each bound: /healthz failed 9.1 s into the partition (bound 16.2 s) and pods came 4.5 s
# after it healed (bound 6.2 s) at load 12, where 5 s left 2.3-2.5 times that; a watch with no client-side bound
# never recovers (kopf's own inactivity timeout is 70 s).
SLACK = 20


def test_a_half_open_partition_fails_healthz_and_a_job_created_after_it_gets_pods_within_the_bound(standin, rest, tmp_path):
    with FaultProxy('127.0.0.1', standin.port) as proxy:
        config = tmp_path / 'kubeconfig'
        config.write_text(yaml.safe_dump(kubeconfig(proxy.url)))
        op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', str(WATCH_TIMEOUT),
                      kubeconfig=config).start()
        try:
            create_job(rest, 'before', workers=1)
            wait_for(lambda: pods(standin, 'before'), what='pods of a job created before the partition')
            assert op.health_status() == 200

            proxy.partition()
            cut = time.monotonic()
            wait_for(lambda: op.health_status() == 500, timeout=BOUNDS.silent_bound + PROBE_CACHE_SECONDS + SLACK,
                     what='/healthz to fail while the watches are silent')
            failed_after = time.monotonic() - cut
            assert failed_after > BOUNDS.silent_bound - 1, failed_after  # not before the bound
            assert proxy.silenced >= 3, proxy.silenced  # kopf's two watches and the heartbeat were cut, not closed

            proxy.heal()
            healed = time.monotonic()
            create_job(rest, 'after', workers=1)
            wait_for(lambda: pods(standin, 'after'), timeout=BOUNDS.client_timeout + BOUNDS.connect_timeout + SLACK,
                     what='pods of a job created after the partition, within the watch bound')
            took = time.monotonic() - healed
            wait_for(lambda: op.health_status() == 200, timeout=PROBE_CACHE_SECONDS + SLACK, what='/healthz to pass again')
            assert 'watches silent for' in op.log() and op.log().count('/healthz fails') == 1, op.log()[-3000:]
            print(f'/healthz failed {failed_after:.1f}s into the partition; pods {took:.1f}s after it healed')
        finally:
            op.stop()

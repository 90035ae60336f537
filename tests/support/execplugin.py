"""A client-go credential plugin for tests: `python execplugin.py STATE_DIR` prints an ExecCredential
whose token is `exec-<n>`, n counting this plugin's runs (kept in STATE_DIR/runs). While STATE_DIR/fail exists it
fails instead, as a cloud's plugin does when its own login lapsed (exit 1, its words on stderr).

As a real plugin does, it answers in the apiVersion the client asked for in $KUBERNETES_EXEC_INFO
(https://kubernetes.io/docs/reference/access-authn-authz/authentication/#input-and-output-formats)."""
import fcntl
import json
import os
import pathlib
import sys


def main() -> int:
    info = os.environ.get('KUBERNETES_EXEC_INFO')
    if not info:
        print('execplugin: KUBERNETES_EXEC_INFO is not set', file=sys.stderr)
        return 1
    state = pathlib.Path(sys.argv[1])
    if (state / 'fail').exists():
        print('execplugin: the cloud login lapsed; run `execplugin login` again', file=sys.stderr)
        return 1
    with (state / 'lock').open('w') as lock:  # two clients may log in at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        runs = state / 'runs'
        count = int(runs.read_text()) + 1 if runs.exists() else 1
        runs.write_text(str(count))
    print(json.dumps({'apiVersion': json.loads(info)['apiVersion'], 'kind': 'ExecCredential', 'status': {'token': f'exec-{count}'}}))
    return 0


if __name__ == '__main__':
    sys.exit(main())

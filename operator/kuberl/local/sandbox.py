"""A pod's filesystem as a directory: each volumeMount a link to its volume's
directory, configMap volumes projected, every path the pod names kept inside the
sandbox root (one that leaves it is refused, naming the field)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from ..core import names, safetext
from ..core.podsource import CONFIGMAP_DEFAULT_MODE, source_problems
from ..core.render import PLACEHOLDER_UID, Job, render_pod
from ..core.torchrun import entry_script
from ..core.validation import DNS_1123_LABEL, DNS_1123_SUBDOMAIN


class LocalRunError(RuntimeError):
    """A pod that cannot run here as rendered (a render bug, or a feature no local node has); one
    line, escaped (safetext), since it quotes the spec's strings."""

    def __init__(self, message: str):
        super().__init__(safetext.one_line(message))


def check_sources(pod: Mapping, container: Mapping) -> None:
    problems = source_problems(pod, container)
    if problems:
        raise LocalRunError("; ".join(problems))


def configmap_files(volume: Mapping, configmaps: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[str, int]]:
    """A configMap volume's files as the kubelet projects them (pkg/volume/configmap makePayload): every
    key, or only `items` at their paths; each with its item's mode, else defaultMode, else 0644. A
    ConfigMap or item key that does not exist leaves the volume empty of it when `optional`, and
    otherwise stops the pod before it starts (a cluster's FailedMount: the pod never leaves ContainerCreating)."""
    source, at = volume["configMap"], f"spec.volumes[{volume['name']}].configMap"
    optional = source.get("optional") is True
    data = configmaps.get(source["name"])
    if data is None:
        if optional:
            return {}
        raise LocalRunError(f"{at}.name: ConfigMap {source['name']!r} does not exist (a cluster leaves the pod in"
                            " ContainerCreating, FailedMount); put it in the job's file or set optional: true")
    mode = CONFIGMAP_DEFAULT_MODE if source.get("defaultMode") is None else source["defaultMode"]
    if not source.get("items"):
        return {key: (value, mode) for key, value in data.items()}
    files: dict[str, tuple[str, int]] = {}
    for j, item in enumerate(source["items"]):
        if item["key"] not in data:
            if optional:
                continue
            raise LocalRunError(f"{at}.items[{j}].key: ConfigMap {source['name']!r} has no key {item['key']!r}"
                                " (a cluster's FailedMount: configmap references non-existent config key)")
        path = os.path.normpath(item["path"])
        if path == ".":  # the API server lets it through; the kubelet cannot write a file over the volume's directory
            raise LocalRunError(f"{at}.items[{j}].path: {item['path']!r} names the volume's own directory, not a file"
                                " (a cluster's FailedMount)")
        files[path] = (data[item["key"]], mode if item.get("mode") is None else item["mode"])  # the same path twice: the last wins
    for path in files:
        parent = os.path.dirname(path)
        while parent:
            if parent in files:
                raise LocalRunError(f"{at}.items: {parent!r} is a file and also the directory of {path!r};"
                                    " the kubelet cannot write both (FailedMount)")
            parent = os.path.dirname(parent)
    return files


def write_files(directory: str, files: Mapping[str, tuple[str, int]]) -> None:
    """Write projected files into a new directory; a path that exists already (a symlink, say) is refused, never followed."""
    os.makedirs(directory)
    for path, (content, mode) in files.items():
        target = os.path.join(directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
        os.chmod(target, mode)


_SCRIPT_PATH = re.compile(r"(?<![\w./-])(/[\w@%+.,-]+(?:/[\w@%+.,-]+)*\.(?:py|sh))(?![\w/])")
_RELATIVE_SCRIPT = re.compile(r"(?!-)[\w@%+.,-]+(?:/[\w@%+.,-]+)*\.(?:py|sh)")  # `train.py`, `src/train.py`; no option


def image_files(pod: Mapping) -> list[str]:
    """The trainer container's command and args that name a script (`*.py`, `*.sh`) by an absolute path
    under no volume's mountPath and absent on this machine: a file baked into the image, which a local
    node (running this machine's files) does not have. Each as `field[i] 'path'`."""
    return [f"{where} {path!r}" for where, path in image_scripts(pod)]


def image_scripts(pod: Mapping) -> list[tuple[str, str]]:
    """image_files' scripts as (field[i], path)."""
    container = trainer_container(pod)
    mounts = [m.get("mountPath", "").rstrip("/") for m in container.get("volumeMounts") or [] if isinstance(m, dict)]
    found = []
    for field in ("command", "args"):
        for i, word in enumerate(container.get(field) or []):
            for path in _SCRIPT_PATH.findall(word) if isinstance(word, str) else []:
                if not any(path.startswith(m + "/") for m in mounts if m) and not os.path.exists(path):
                    found.append((f"{field}[{i}]", path))
    return found


def absent_entry_script(pod: Mapping, cwd: str) -> tuple[str, str] | None:
    """The script the trainer container's command line runs, as (field[i], path), when it is not here, else None:
    the word at the script's position of python's or torch's launcher's command line, or the program itself
    (torchrun.entry_script: `torchrun … /app/t.py`, `python t.py`, not `python t.py --config later.py`'s later one),
    which its program opens before anything else runs. An absolute path as image_scripts finds it (in no volume,
    absent); a relative one absent from `cwd`, where kuberl run starts the pods when the container names no
    workingDir. Nothing here could make it first (init containers are not run here), but inline code could: a command
    line with a shell (`sh -c`, `bash x.sh`) or `-c` code is left to fail, and missing_script_failure to read."""
    container = trainer_container(pod)
    words = [(f"{field}[{i}]", word) for field in ("command", "args")
             for i, word in enumerate(container.get(field) or []) if isinstance(word, str)]
    at = entry_script([word for _, word in words])
    if at == 0 and "/" not in words[0][1]:
        return None  # a program named bare is looked up on PATH (an image's /usr/local/bin/train.sh), never in `cwd`
    script = words[at] if at is not None and (_SCRIPT_PATH.fullmatch(words[at][1]) or _RELATIVE_SCRIPT.fullmatch(words[at][1])) else None
    if script is None or not script[1].startswith("/"):
        return script if script and not container.get("workingDir") and not os.path.exists(os.path.join(cwd, script[1])) else None
    return script if script in image_scripts(pod) else None


def missing_script_failure(message: str, scripts: list[str]) -> str | None:
    """The script of `scripts` (image_scripts' paths) that a failure's message says was not found, else None:
    python's "can't open file '…': [Errno 2] No such file", a shell's "…: No such file or directory". Here no
    restart can bring it (a cluster's image may have it), so a local run stops rather than spend its restarts."""
    if "No such file" not in message:
        return None
    # the path whole, as python quotes it or a shell starts its line with it: not the end of a longer path
    return next((path for path in scripts if re.search(rf"(?:^|[\s'\"]){re.escape(path)}['\":]", message)), None)


def trainer_container(pod: Mapping) -> dict:
    containers = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == names.TRAINER_CONTAINER), containers[0])


def kubelet_mount_paths(pod: Mapping) -> dict:
    """`pod` with each container's relative mountPath made absolute as a kubelet mounts it: the API server
    takes `mountPath: data`, and makeMounts (pkg/kubelet/kubelet_pods.go) mounts it at
    filepath.Clean("/" + path), /data. A copy: every later reading of the pod sees the path the container has."""
    pod = {**pod, "spec": {**pod["spec"]}}
    for kind in ("initContainers", "containers"):
        if isinstance(pod["spec"].get(kind), list):
            pod["spec"][kind] = [_absolute_mounts(c) for c in pod["spec"][kind]]
    return pod


def _absolute_mounts(container: object) -> object:
    mounts = container.get("volumeMounts") if isinstance(container, dict) else None
    if not isinstance(mounts, list):
        return container
    def absolute(m: object) -> object:
        path = m.get("mountPath") if isinstance(m, dict) else None
        return {**m, "mountPath": os.path.normpath("/" + path)} if isinstance(path, str) and path and not path.startswith("/") else m
    return {**container, "volumeMounts": [absolute(m) for m in mounts]}


def _inside(root: str, path: str) -> bool:
    resolved = os.path.normpath(os.path.join(root, path.lstrip("/")))
    return resolved == root or resolved.startswith(root.rstrip("/") + "/")


OUTSIDE_ROOT = "is not an absolute path inside the container: expected one starting with '/' that no '..' leads out of"


def path_problems(pod: Mapping, container: Mapping, named: Callable[[str], str | None] | None = None) -> list[str]:
    """Every path of the pod that would leave its root here, or that this node cannot lay out, by field path.
    `named`: the field the user wrote for a field of the pod (job_path_problems'), None for one of kuberl's own;
    by default the pod's own field paths."""
    def field(path: str) -> str:
        return (named(path) if named else None) or path
    root = "/pod-root"
    where = f"spec.containers[{container.get('name')}]"
    problems = []
    for i, volume in enumerate(pod["spec"].get("volumes") or []):
        name = volume.get("name")
        # validateVolumes (pkg/apis/core/validation): a volume's name is a DNS-1123 label; here it names a directory
        if not isinstance(name, str) or len(name) > 63 or not re.fullmatch(DNS_1123_LABEL, name):
            problems.append(f"{field(f'spec.volumes[{i}].name')}: {name!r} is not a DNS-1123 label (at most 63 lowercase"
                            " letters, digits and '-', starting and ending with a letter or digit)")
        for kind in ("persistentVolumeClaim", "configMap"):
            key = "claimName" if kind == "persistentVolumeClaim" else "name"
            name = volume[kind].get(key) if isinstance(volume.get(kind), dict) else None
            # the API server's rule for both names, so neither can name a path outside the run directory
            if name is not None and (len(name) > 253 or not re.fullmatch(DNS_1123_SUBDOMAIN, str(name))):
                problems.append(f"{field(f'spec.volumes[{i}].{kind}.{key}')}: {name!r} is not a DNS-1123 subdomain name")
    laid_out = []  # the mounts whose path is sound, for the layout's rules
    for i, mount in enumerate(container.get("volumeMounts") or []):
        path = str(mount.get("mountPath", ""))
        at = f"{where}.volumeMounts[{i}]"
        if not path.startswith("/") or not _inside(root, path):
            problems.append(f"{field(at + '.mountPath')}: {path!r} {OUTSIDE_ROOT}")
        elif named and named(at + ".mountPath") is None:
            laid_out.append(Mount(clean_path(path), KUBERL_MOUNTS.get(mount.get("name"), str(mount.get("name"))), ours=True))
        else:
            laid_out.append(Mount(clean_path(path), field(at + ".mountPath")))
        sub = str(mount.get("subPath") or "")  # null is unset, as everywhere in a pod
        if sub.startswith("/") or ".." in sub.split("/"):
            problems.append(f"{field(at + '.subPath')}: {sub!r} must be a relative path without '..'")
    for name in ("terminationMessagePath", "workingDir"):
        path = container.get(name)
        if path is not None and (not str(path).startswith("/") or not _inside(root, str(path))):
            problems.append(f"{field(f'{where}.{name}')}: {path!r} {OUTSIDE_ROOT}")
    log = container.get("terminationMessagePath")
    log_field = f"{where}.terminationMessagePath"
    if log is not None and str(log).startswith("/") and _inside(root, str(log)):
        problems += mount_layout_problems(laid_out, clean_path(str(log)), named(log_field) if named else log_field)
    else:
        problems += mount_layout_problems(laid_out)
    # validateVolumes and validateVolumeMounts (pkg/apis/core/validation): "Duplicate value", "must be unique"
    volume_names = [v.get("name") for v in pod["spec"].get("volumes") or []]
    problems += [f"{field(f'spec.volumes[{i}].name')}: {n!r} is a duplicate: volume names are unique in a pod"
                 for i, n in enumerate(volume_names) if n in volume_names[:i]]
    mounted = [os.path.normpath(str(m.get("mountPath", ""))) for m in container.get("volumeMounts") or []]
    problems += [f"{field(f'{where}.volumeMounts[{i}].mountPath')}: {m!r} is mounted twice: mount paths are unique in a"
                 " container" for i, m in enumerate(mounted) if m in mounted[:i]]
    return problems


# --- what a local node cannot lay out: one rule, said by `kuberl validate` and `kuberl run` alike --------------


@dataclass(frozen=True)
class Mount:
    """A trainer volume mount as this node lays it out. `path`: clean and absolute (clean_path); `field`: the field
    that wrote it, or for kuberl's own mounts what they hold; `ours`: kuberl's own (no field of the user's)."""

    path: str
    field: str
    ours: bool = False


KUBERL_MOUNTS = {names.CONFIG_VOLUME: "trainer configuration", names.SHM_VOLUME: "shared memory",
                 names.TMP_VOLUME: "temporary directory", names.CHECKPOINT_VOLUME: "checkpoint"}


def clean_path(path: str) -> str:
    """A mountPath as a kubelet mounts it, filepath.Clean("/" + path) (makeMounts, pkg/kubelet/kubelet_pods.go):
    `data` is /data, `/data/` and `//data` are /data."""
    return "/" + posixpath.normpath("/" + path).lstrip("/")


def _named(mount: Mount) -> str:
    return f"kuberl's own {mount.field} mount ({mount.path!r})" if mount.ours else f"{mount.path!r} ({mount.field})"


def mount_layout_problems(mounts: list[Mount], log: str = names.TERMINATION_LOG, log_field: str | None = None) -> list[str]:
    """The trainer's mounts this node cannot lay out, each said at the field the user wrote. Here each mount is a
    symlink inside the pod's root directory, so none can be the root itself, none can lie inside another (a cluster
    nests a ConfigMap at /data/cfg in a claim at /data; here the inner link would be made inside the outer volume),
    and the termination-message file (`log`; `log_field` where the user set it, None for the default), which a
    kubelet mounts as a file of its own, must lie outside them: here the volume's own file would be emptied at every
    start."""
    problems = []
    for mount in mounts:
        if mount.path == "/":
            problems.append(f"{mount.field}: '/' is the container's root, which no volume can replace here (each mount"
                            " is a symlink inside the pod's root directory): expected a directory of its own, e.g. /data")
    below = [m for m in mounts if m.path != "/"]
    for inner in below:
        for outer in below:
            if not inner.path.startswith(outer.path + "/") or (inner.ours and outer.ours):
                continue
            if not inner.ours:
                problems.append(f"{inner.field}: {inner.path!r} is inside another mount, {_named(outer)}, which this node"
                                " cannot lay out (each mount is a symlink here): expected mounts side by side")
            else:
                problems.append(f"{outer.field}: {outer.path!r} holds {_named(inner)}, which this node cannot lay out"
                                " (each mount is a symlink here): expected a mount beside it, not above it")
    if log_field is not None and (log == "/" or log in {m.path for m in mounts}):
        problems.append(f"{log_field}: {log!r} is a directory here (the root or a mount): expected a file's path")
        return problems
    holder = next((m for m in below if log.startswith(m.path + "/")), None)
    if holder is not None and log_field is not None:
        problems.append(f"{log_field}: {log!r} is inside a volume mount, {_named(holder)}; this node would empty that"
                        f" volume's file at every start: expected a path outside the mounts (default {names.TERMINATION_LOG})")
    elif holder is not None and not holder.ours:
        problems.append(f"{holder.field}: {holder.path!r} holds the termination-message file ({log}, terminationMessagePath's"
                        " default), which this node would empty in that volume at every start: expected a mount elsewhere,"
                        " or a terminationMessagePath outside it")
    return problems


def job_path_problems(job: Job) -> list[str]:
    """path_problems of the job's worker 0 as this node renders it (kuberl's checkpoint mount is in worker 0 alone),
    each problem at the spec.template field the user wrote, not at the rendered pod's (kuberl's own mounts come first
    there, so the user's volumeMounts[0] is its volumeMounts[4]). `kuberl validate` warns with these words, and
    `kuberl run` refuses with them before it makes a run directory."""
    rendered = render_pod(job, "default", PLACEHOLDER_UID, 0, target="local")
    pod = kubelet_mount_paths(rendered)
    return path_problems(pod, trainer_container(pod), template_fields(rendered, job.spec.template))


def template_fields(pod: Mapping, template: Mapping | None) -> Callable[[str], str | None]:
    """The spec.template field that wrote a field of the rendered `pod` (as path_problems names it); None where
    kuberl wrote it. The template's mounts merge by mountPath and its volumes by name (render.merge_template)."""
    spec = (template or {}).get("spec") or {}
    containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
    index, theirs = next(((i, c) for i, c in enumerate(containers)
                          if isinstance(c, dict) and c.get("name") == names.TRAINER_CONTAINER), (None, {}))
    at = f"spec.template.spec.containers[{index}]"
    mounts = theirs.get("volumeMounts") if isinstance(theirs.get("volumeMounts"), list) else []
    by_path = {}
    for j, mount in enumerate(mounts):
        if isinstance(mount, dict):
            by_path.setdefault(mount.get("mountPath"), j)
    volumes = spec.get("volumes") if isinstance(spec.get("volumes"), list) else []
    by_name = {}
    for j, volume in enumerate(volumes):
        if isinstance(volume, dict):
            by_name.setdefault(volume.get("name"), j)
    rendered_mounts = trainer_container(pod).get("volumeMounts") or []
    rendered_volumes = pod["spec"].get("volumes") or []

    def named(field: str) -> str | None:
        if (m := re.fullmatch(r"spec\.containers\[[^]]*\]\.volumeMounts\[(\d+)\](.*)", field)) and int(m[1]) < len(rendered_mounts):
            j = by_path.get(rendered_mounts[int(m[1])].get("mountPath"))
            return None if j is None else f"{at}.volumeMounts[{j}]{m[2]}"
        if (m := re.fullmatch(r"spec\.volumes\[(\d+)\](.*)", field)) and int(m[1]) < len(rendered_volumes):
            j = by_name.get(rendered_volumes[int(m[1])].get("name"))
            return None if j is None else f"spec.template.spec.volumes[{j}]{m[2]}"
        if m := re.fullmatch(r"spec\.containers\[[^]]*\]\.(\w+)(.*)", field):
            return f"{at}.{m[1]}{m[2]}" if m[1] in theirs else None
        return None
    return named


_POD_FIELD = re.compile(r"spec\.(?:containers\[[^\]\s]*\]|volumes\[\d+\])(?:\.\w+|\[\d+\])*")


def at_template_fields(message: str, named: Callable[[str], str | None]) -> str:
    """`message` with each field of the rendered pod it names (`spec.containers[trainer].volumeMounts[4].subPath`)
    as the spec.template field the user wrote (template_fields' `named`), where the user wrote it."""
    return _POD_FIELD.sub(lambda m: named(m[0]) or m[0], message)


def check_paths(pod: Mapping, container: Mapping) -> None:
    problems = path_problems(pod, container)
    if problems:
        raise LocalRunError("; ".join(problems))


def pod_roots_dir(run_dir: str) -> str:
    """Where a run's pods have their roots (`<roots>/<pod>/root`, KUBERL_FS_ROOT): outside the run directory, in
    this user's runtime directory, one directory a run (named by its run directory). A root holds its mounts, links
    to their volumes: under runs/ the checkpoint volume's TensorBoard files were a second time under rank 0's root,
    and `tensorboard --logdir runs` listed a live run twice. Named, not random, so a later run finds the processes
    an earlier runner left (their KUBERL_FS_ROOT is under it)."""
    base = os.path.join(runtime_dir(), f"kuberl-{os.getuid()}-roots")
    return os.path.join(base, hashlib.sha256(os.path.abspath(run_dir).encode()).hexdigest()[:16])


def runtime_dir() -> str:
    """This user's directory for a run's runtime files: $XDG_RUNTIME_DIR where it is an absolute path, else the temp
    directory. A relative one is invalid, to be ignored (the XDG Base Directory Specification): taken, it made
    directories under whatever directory kuberl run was started in, and named another place from each."""
    given = os.environ.get("XDG_RUNTIME_DIR") or ""
    return given if os.path.isabs(given) else tempfile.gettempdir()


def make_pod_roots(run_dir: str) -> str | None:
    """`pod_roots_dir(run_dir)`, made: its parent private to this user (0700, theirs: a directory of that name another
    user made first in a shared /tmp is not used); None where it cannot be, and the roots stay in the run directory."""
    roots = pod_roots_dir(run_dir)
    base = os.path.dirname(roots)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(base, 0o700)
        info = os.lstat(base)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        with contextlib.suppress(FileExistsError):
            os.mkdir(roots, 0o700)
        return roots if stat.S_ISDIR(os.lstat(roots).st_mode) else None
    except OSError:
        return None


def prepare_sandbox(
    sandbox: str,
    pod: Mapping,
    container: Mapping,
    configmaps: Mapping[str, Mapping[str, str]],
    claim_dir: Callable[[str], str],
    roots: str | None = None,
) -> str:
    """A fresh directory standing in for the container's root; returns it: `roots`/<pod>/root (make_pod_roots), else
    the sandbox's root/. emptyDir and configMap volumes live in the sandbox (gone with the pod: a
    configMap volume is projected afresh for each pod, as a kubelet does);
    claim volumes are the caller's directories, shared and lasting."""
    check_paths(pod, container)
    check_sources(pod, container)
    projected = {v["name"]: configmap_files(v, configmaps) for v in pod["spec"].get("volumes") or [] if "configMap" in v}
    remove_tree(sandbox)
    if roots is not None:
        remove_tree(os.path.join(roots, os.path.basename(sandbox)))
    with _as_local_run_error(container):
        return _lay_out(sandbox, pod, container, projected, claim_dir, roots)


def unmount(root: str) -> None:
    """Take down an ended pod's mounts, as a kubelet unmounts a terminated pod's volumes: every link in its root
    goes (never followed; the volumes' files stay where they are). A mount left behind is a second path to its
    volume under runs/, and `tensorboard --logdir runs` listed each run twice, once through a pod's root."""
    for parent, dirs, files in os.walk(root):  # never into a link
        for name in dirs + files:
            path = os.path.join(parent, name)
            if os.path.islink(path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def remove_tree(path: str) -> None:
    """Remove a pod's old sandbox, a fresh root for the next pod as a node gives it: a directory the old pod
    left without write permission (a module cache's read-only tree, say) is made writable first (its
    processes are gone by then), where rmtree alone left it and the next pod could not be laid out."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path) or os.path.islink(path):
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for parent, dirs, _ in os.walk(path):  # top-down: each directory is made listable before the walk enters it
        for name in dirs:
            if not os.path.islink(os.path.join(parent, name)):  # chmod would follow a link out of the sandbox
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(parent, name), 0o700)
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _as_local_run_error(container: Mapping) -> Iterator[None]:
    """A pod shape validation let through must not end `kuberl run` in a traceback."""
    try:
        yield
    except (OSError, KeyError, TypeError) as e:
        shown = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) else f"{type(e).__name__}: {e}"
        raise LocalRunError(f"spec.containers[{container.get('name')}]: cannot lay out the container's volumes and"
                            f" files here ({shown})") from None


def descend(top: str, path: str, field: str, what: str, mounts: Collection[str] = (), create: bool = True,
            written: str | None = None) -> int:
    """An open directory `path` under `top`, each component opened without following a link
    (O_NOFOLLOW at the parent's dir_fd) and, with `create`, made first where missing: the runner never
    creates or enters a directory a link leads to, and a link swapped in between a check and a create
    is met at the open, not followed. `mounts`: paths (as `path` is written) of the links this node
    made itself for volume mounts, the only ones followed. A link or a file on the way is refused,
    naming `field` as `written` there (default `path`; `what`: where the path must stay)."""
    shown = path if written is None else written
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    walked = ""
    try:
        for name in (part for part in path.split("/") if part not in ("", ".")):
            walked += "/" + name
            ours = walked in mounts
            if name == "..":
                raise LocalRunError(f"{field}: {shown!r} leads out of {what} ('..')")
            if create and not ours:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | (0 if ours else os.O_NOFOLLOW), dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                if not stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                    raise LocalRunError(f"{field}: {shown!r}: {walked.lstrip('/')!r} is not a directory") from None
                raise LocalRunError(f"{field}: {shown!r} leads out of {what} through a symlink in it ({walked.lstrip('/')!r}):"
                                    " this node never follows one") from None
            os.close(fd)
            fd = inner
        return fd
    except BaseException:
        os.close(fd)
        raise


def make_dirs(top: str, path: str, field: str, what: str, mounts: Collection[str] = ()) -> None:
    """`descend`, for the directories it creates."""
    os.close(descend(top, path, field, what, mounts))


def _mount_of(container: Mapping, path: str) -> Mapping | None:
    """The volume mount a container path lies in, if any (mounts never nest: path_problems)."""
    normal = os.path.normpath(path)
    return next((m for m in container.get("volumeMounts") or []
                 if normal == os.path.normpath(m["mountPath"]) or normal.startswith(os.path.normpath(m["mountPath"]).rstrip("/") + "/")),
                None)


def working_dir(root: str, container: Mapping, create: bool = True) -> int:
    """The container's workingDir, opened (and made, as runc makes a missing one) without following a
    link the pod's volumes hold: a co-tenant's `link -> /elsewhere` in a shared claim made the runner
    create `/elsewhere/made-by-runner` and start the pod there."""
    path = container["workingDir"]
    mount = _mount_of(container, path)
    what = f"volume {mount['name']!r}" if mount else "the container's root"
    mounts = {os.path.normpath(m["mountPath"]) for m in container.get("volumeMounts") or []}
    return descend(root, os.path.normpath(path), f"spec.containers[{container.get('name')}].workingDir", what, mounts, create)


def _lay_out(sandbox: str, pod: Mapping, container: Mapping, projected: Mapping[str, Mapping[str, tuple[str, int]]],
             claim_dir: Callable[[str], str], roots: str | None = None) -> str:
    top = os.path.dirname(os.path.dirname(sandbox))  # the run's directory: its pods/ is any pod's to replace
    os.makedirs(top, exist_ok=True)
    make_dirs(top, os.path.relpath(sandbox, top), "the pod's sandbox", f"the run's directory {top}")
    if roots is None:
        root = os.path.join(sandbox, "root")
        make_dirs(top, os.path.relpath(root, top), "the pod's root", f"the run's directory {top}")
    else:  # the run's own directory of roots (make_pod_roots): any of its pods' to replace, as pods/ is
        root = os.path.join(roots, os.path.basename(sandbox), "root")
        make_dirs(roots, os.path.relpath(root, roots), "the pod's root", f"the run's directory of roots {roots}")
    sources = {}
    index = {v["name"]: i for i, v in enumerate(pod["spec"].get("volumes") or [])}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        if "emptyDir" in volume:
            sources[name] = os.path.join(sandbox, "volumes", name)
            os.makedirs(sources[name])
        elif "configMap" in volume:
            sources[name] = os.path.join(sandbox, "volumes", name)
            write_files(sources[name], projected[name])
        elif "persistentVolumeClaim" in volume:
            sources[name] = claim_dir(volume["persistentVolumeClaim"]["claimName"])
            if os.path.islink(sources[name]):  # runs/_claims/<claim> is any run's pods' to replace
                raise LocalRunError(f"spec.volumes[{index[name]}].persistentVolumeClaim.claimName: the claim's directory"
                                    f" {sources[name]} is a symlink: this node never follows one")
        elif "hostPath" in volume:
            sources[name] = volume["hostPath"]["path"]
        else:
            kind = next((k for k in volume if k != "name"), "?")
            raise LocalRunError(f"volume {name!r}: {kind} volumes cannot be served locally")
    where = f"spec.containers[{container.get('name')}]"
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if mount["name"] not in sources:
            raise LocalRunError(f"volumeMount {mount['mountPath']}: the pod has no volume {mount['name']!r}")
        sub = mount.get("subPath") or ""
        source = os.path.join(sources[mount["name"]], sub)
        if sub:  # made as the kubelet's PrepareSafeSubpath makes it: never through a link in the volume
            subpath = f"{where}.volumeMounts[{i}].subPath"
            parent = descend(sources[mount["name"]], os.path.dirname(os.path.normpath(sub)), subpath, f"volume {mount['name']!r}",
                             written=sub)
            try:
                last = os.path.basename(os.path.normpath(sub))
                with contextlib.suppress(FileExistsError):
                    os.mkdir(last, dir_fd=parent)
                if stat.S_ISLNK(os.lstat(last, dir_fd=parent).st_mode):  # a regular file (one ConfigMap key) mounts that file
                    raise LocalRunError(f"{subpath}: {sub!r} leads out of volume {mount['name']!r} through a symlink in it"
                                        f" ({os.path.normpath(sub)!r}): this node never follows one")
            finally:
                os.close(parent)
        elif not os.path.isfile(source):  # the volume's own directory (a hostPath as DirectoryOrCreate)
            os.makedirs(source, exist_ok=True)
        target = os.path.normpath(host_path(root, mount["mountPath"]))
        parent = descend(root, os.path.dirname(os.path.normpath(mount["mountPath"])), f"{where}.volumeMounts[{i}].mountPath",
                         "the container's root (each mount is a symlink here: one inside another cannot be laid out)")
        try:
            os.symlink(os.path.abspath(source), os.path.basename(target), dir_fd=parent)
        finally:
            os.close(parent)
    mounts = {os.path.normpath(m["mountPath"]) for m in container.get("volumeMounts") or []}
    log = os.path.normpath(container.get("terminationMessagePath") or names.TERMINATION_LOG)
    parent = descend(root, os.path.dirname(log), f"{where}.terminationMessagePath", "the container's root", mounts)
    try:
        os.close(os.open(os.path.basename(log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666, dir_fd=parent))
    finally:
        os.close(parent)
    make_dirs(root, names.TMP_MOUNT_DIR, "TMPDIR", "the container's root", mounts)
    if container.get("workingDir"):  # runc creates a missing working directory (opencontainers/runc#1604)
        os.close(working_dir(root, container))
    return root


def host_path(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))

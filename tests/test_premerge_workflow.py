"""The premerge workflow's triggers, as GitHub would decide them for the events a pull request sees:
which jobs run, in which concurrency group, and which changes run nothing. The job conditions and
the group are GitHub expressions; they are evaluated here for each event (the few operators they
use, mapped onto Python's, whose `and` / `or` return an operand as GitHub's `&&` / `||` do)."""
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow file")

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "premerge.yml"
REPO = "k3/k3diff"
CPU_JOBS = {"cpu", "pytest", "min-versions", "wheel"}


class Ctx:
    """A GitHub context: a missing property is null (None)."""

    def __init__(self, **values):
        self.__dict__.update({k: Ctx(**v) if isinstance(v, dict) else v for k, v in values.items()})

    def __getattr__(self, name):
        return None


def _python(expr: str) -> str:
    expr = re.sub(r"format\(('[^']*'),\s*", r"\1.format(", expr)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    return re.sub(r"!(?!=)", " not ", expr)


def evaluate(text, github):
    """`${{ expr }}` (or a bare expression, as a job's `if` may be) evaluated; a string with several
    `${{ }}` in it is the string with each replaced."""
    text = " ".join(str(text).split())
    parts = re.findall(r"\$\{\{(.*?)\}\}", text)
    if not parts:
        return eval(_python(text), {}, {"github": github})
    if text.startswith("${{") and text.endswith("}}") and len(parts) == 1:
        return eval(_python(parts[0]), {}, {"github": github})
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(eval(_python(m.group(1)), {}, {"github": github})), text)


@pytest.fixture(scope="module")
def workflow():
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.get("on", doc.get(True))        # YAML 1.1 reads the key `on` as true
    return doc


def pr_event(action, label=None, fork=False, number=7):
    event = {"action": action, "pull_request": {"number": number, "head": {"repo": {
        "full_name": "someone/k3diff" if fork else REPO}}}}
    if label is not None:
        event["label"] = {"name": label}
    return Ctx(event_name="pull_request", repository=REPO, ref=f"refs/pull/{number}/merge", event=event)


def push_event():
    return Ctx(event_name="push", repository=REPO, ref="refs/heads/main", event={})


def jobs_run(workflow, github):
    return {name for name, job in workflow["jobs"].items() if "if" not in job or evaluate(job["if"], github)}


def group(workflow, github):
    return evaluate(workflow["concurrency"]["group"], github)


def test_a_push_runs_the_cpu_jobs_and_never_the_gpu_job(workflow):
    for action in ("opened", "synchronize", "reopened"):
        assert jobs_run(workflow, pr_event(action)) == CPU_JOBS, action
    assert jobs_run(workflow, push_event()) == CPU_JOBS


def test_the_gpu_job_runs_when_its_label_is_applied_and_only_then(workflow):
    assert jobs_run(workflow, pr_event("labeled", "gpu")) == {"gpu"}
    assert jobs_run(workflow, pr_event("labeled", "documentation")) == set()
    assert jobs_run(workflow, pr_event("labeled", "gpu", fork=True)) == set()   # a fork's code: never
    # a later push to a pull request that carries the label: the CPU jobs, not the GB300 again
    later = pr_event("synchronize")
    later.event.pull_request.labels = [Ctx(name="gpu")]
    assert "gpu" not in jobs_run(workflow, later)


def test_a_label_event_neither_restarts_nor_cancels_the_cpu_jobs(workflow):
    code = group(workflow, pr_event("synchronize"))
    assert group(workflow, pr_event("opened")) == code       # a new push cancels the last push's run
    labels = {group(workflow, pr_event("labeled", name)) for name in ("gpu", "documentation")}
    assert code not in labels and len(labels) == 2           # another label does not cancel the GPU job
    assert group(workflow, pr_event("synchronize", number=8)) != code
    assert workflow["on"]["pull_request"]["types"] == ["opened", "synchronize", "reopened", "labeled"]


def _skipped(patterns, changed):
    """GitHub's paths-ignore: a run is skipped when every changed file matches an ignored pattern
    (`**` any characters, folders too; `*` any within one folder)."""
    def match(path, pattern):
        regex = re.escape(pattern).replace(r"\*\*", "\0").replace(r"\*", "[^/]*").replace("\0", ".*")
        return re.fullmatch(regex, path) is not None

    return all(any(match(path, p) for p in patterns) for path in changed)


@pytest.mark.parametrize("trigger", ["pull_request", "push"])
def test_documentation_only_changes_run_nothing(workflow, trigger):
    ignored = workflow["on"][trigger]["paths-ignore"]
    assert _skipped(ignored, ["docs/guide.md", "lab/verdicts.md", "README.md", "ARCHITECTURE.md"])
    assert _skipped(ignored, ["lab/ep/" + "notes.md"])       # a page in a folder of any depth
    assert not _skipped(ignored, ["docs/guide.md", "k3diff/plugin.py"])
    assert not _skipped(ignored, ["scripts/test"])


def test_the_version_jobs_call_their_scripts(workflow):
    steps = {name: " ".join(s.get("run", "") for s in job["steps"]) for name, job in workflow["jobs"].items()}
    assert "scripts/pytest8_check.sh" in steps["pytest"]
    assert workflow["jobs"]["pytest"]["strategy"]["matrix"]["pytest"][0].startswith("8.")
    assert workflow["jobs"]["pytest"]["strategy"]["matrix"]["pytest"][-1].startswith("9.")
    assert "min_versions_check.sh" in steps["min-versions"]   # written beside this one, merged with it
    assert "scripts/wheel_check.sh" in steps["wheel"]

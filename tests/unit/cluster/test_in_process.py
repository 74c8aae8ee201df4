"""The cluster modules' action plugins: the module's own work in the worker process where the module would run on
this controller, with the result the module would return; the module itself everywhere else."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest
from ansible_collections.gpuops.nvidia.plugins.action import cluster_apply as cluster_apply_action
from ansible_collections.gpuops.nvidia.plugins.action import cluster_read as cluster_read_action
from ansible_collections.gpuops.nvidia.plugins.action import gpu_validation as gpu_validation_action
from ansible_collections.gpuops.nvidia.plugins.modules import cluster_apply, cluster_read, gpu_validation
from ansible_collections.gpuops.nvidia.plugins.plugin_utils.in_process import runs_here

from tests.unit.cluster.test_cluster_read import READS, FakeServer
from tests.unit.harness import call


@pytest.fixture
def kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "clusters: [{name: lab, cluster: {server: 'http://127.0.0.1:6443'}}]\n"
        "contexts: [{name: lab, context: {cluster: lab, user: admin}}]\n"
        "users: [{name: admin, user: {token: secret-token}}]\n")
    return str(path)


@pytest.fixture
def exec_kubeconfig(tmp_path):
    """A user only the kubernetes client can serve (an exec credential plugin, as EKS and GKE write them)."""
    path = tmp_path / "exec-kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: eks\n"
        "clusters: [{name: eks, cluster: {server: 'https://eks.example:443'}}]\n"
        "contexts: [{name: eks, context: {cluster: eks, user: aws}}]\n"
        "users: [{name: aws, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: aws}}}]\n")
    return str(path)


def test_runs_here_only_where_the_module_would_run_on_this_controller_without_the_client(kubeconfig, exec_kubeconfig):
    params = {"kubeconfig": kubeconfig}
    assert runs_here("local", False, 0, [], params, {})
    assert runs_here("ansible.builtin.local", False, 0, [], params, {})
    assert not runs_here("ssh", False, 0, [], params, {})  # delegated to a bastion
    assert not runs_here("local", True, 0, [], params, {})  # become
    assert not runs_here("local", False, 30, [], params, {})  # async
    assert not runs_here("local", False, 0, [{"HTTPS_PROXY": "http://proxy:3128"}], params, {})  # a task environment
    assert not runs_here("local", False, 0, [], {"kubeconfig": exec_kubeconfig}, {})
    # K8S_AUTH_KUBECONFIG, as AWX's credential sets it, counts as the option.
    assert runs_here("local", False, 0, [], {}, {"K8S_AUTH_KUBECONFIG": kubeconfig})
    assert not runs_here("local", False, 0, [], {}, {"K8S_AUTH_KUBECONFIG": exec_kubeconfig})


def _action(plugin, args: dict, transport: str = "local", check_mode: bool = False, diff: bool = False):
    task = SimpleNamespace(args=args, check_mode=check_mode, diff=diff, async_val=0, environment=[], action=plugin.__name__,
                           no_log=False)
    connection = SimpleNamespace(transport=transport, has_native_async=False, _shell=SimpleNamespace(tmpdir=None))
    action = plugin.ActionModule(task, connection, SimpleNamespace(become=False), None, None)
    return action


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(cluster_read, "connect", lambda module: fake)
    return fake


def test_the_read_in_process_returns_what_the_module_returns(server, kubeconfig):
    args = {"reads": READS, "kubeconfig": kubeconfig, "api_key": "secret-token"}
    module = call(cluster_read.main, args)
    with mock.patch.object(cluster_read_action.ActionModule, "_execute_module") as execute:
        here = _action(cluster_read_action, args).run(task_vars={})
    execute.assert_not_called()
    # (The harness adds failed: false to what exit_json is given.)
    assert not here.get("failed") and not module["failed"]
    assert {k: v for k, v in here.items() if k != "invocation"} == {k: v for k, v in module.items() if k not in ("invocation", "failed")}
    # The no_log options' values never come back (the kubeconfig path is one: kubernetes.core's spec marks it).
    assert here["invocation"]["module_args"]["api_key"] != "secret-token"
    assert "secret-token" not in str(here) and kubeconfig not in str(here)


def test_a_failure_in_process_is_the_modules(server, kubeconfig):
    server.forbidden.add("/apis/apps/v1/deployments")
    args = {"reads": READS, "kubeconfig": kubeconfig}
    module = call(cluster_read.main, args)
    with mock.patch.object(cluster_read_action.ActionModule, "_execute_module") as execute:
        here = _action(cluster_read_action, args).run(task_vars={})
    execute.assert_not_called()
    assert here["failed"] and (here["msg"], here["status"]) == (module["msg"], module["status"]) == (
        "reading deployments (/apis/apps/v1/deployments) failed: /apis/apps/v1/deployments is forbidden", 403)


@pytest.mark.parametrize("transport", ["ssh", "community.docker.docker"])
def test_elsewhere_the_module_runs(server, kubeconfig, transport):
    with mock.patch.object(cluster_read_action.ActionModule, "_execute_module", return_value={"ran": "the module"}) as execute, \
            mock.patch.object(cluster_read_action.ActionModule, "_remove_tmp_path"):
        out = _action(cluster_read_action, {"reads": READS, "kubeconfig": kubeconfig}, transport=transport).run(task_vars={})
    execute.assert_called_once()
    assert out == {"ran": "the module"} and server.calls == []


def test_bad_arguments_get_the_modules_own_message(server, kubeconfig):
    """AnsibleModule words them (an unknown option, a missing required one): the module runs to say so."""
    with mock.patch.object(cluster_read_action.ActionModule, "_execute_module", return_value={"failed": True}) as execute, \
            mock.patch.object(cluster_read_action.ActionModule, "_remove_tmp_path"):
        _action(cluster_read_action, {"kubeconfig": kubeconfig, "readz": []}).run(task_vars={})
    execute.assert_called_once()
    assert server.calls == []


def test_check_mode_and_diff_reach_the_work(monkeypatch, kubeconfig):
    seen = {}

    def body(module):
        seen.update(check_mode=module.check_mode, diff=module._diff)  # pylint: disable=protected-access
        module.warn("a warning")
        module.exit_json(changed=True)

    monkeypatch.setattr(cluster_apply_action.ActionModule, "body", staticmethod(body))
    out = _action(cluster_apply_action, {"objects": [], "kubeconfig": kubeconfig}, check_mode=True, diff=True).run(task_vars={})
    assert seen == {"check_mode": True, "diff": True}
    assert out["changed"] is True and out["warnings"] == ["a warning"]


def test_each_action_runs_its_own_modules_work_with_its_spec():
    for action, module in ((cluster_read_action, cluster_read), (cluster_apply_action, cluster_apply),
                           (gpu_validation_action, gpu_validation)):
        assert action.ActionModule.argument_spec is module.ARGUMENT_SPEC
        assert action.ActionModule.body is module.run

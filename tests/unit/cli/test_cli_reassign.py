"""``millrace reassign`` and ``millrace elect-leaders`` (broker/cli/reassign.py,
broker/cli/elect_leaders.py): argument parsing, output formatting and the controller
client, against a fake cluster that answers decoded kio responses (no network)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from broker.cli import elect_leaders as el
from broker.cli import reassign as ra
from broker.cli.common import CliError
from broker.cli.main import build_parser, main
from broker.protocol import registry
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition
ZERO = datetime.timedelta(0)


# --- a fake cluster answering kio responses ------------------------------------------------


class FakeCluster:
    """Brokers 1..3 on ports 9001..9003; ``controller`` answers controller requests, the
    others NOT_CONTROLLER. Records (port, api_key, body) of every request."""

    def __init__(
        self,
        replicas: dict[TopicPartition, list[int]],
        *,
        controller: int = 2,
        racks: dict[int, str] | None = None,
        ongoing: dict[TopicPartition, tuple[list[int], list[int], list[int]]] | None = None,
    ) -> None:
        self.replicas = replicas
        self.controller = controller
        self.racks = racks or {}
        self.ongoing = ongoing or {}
        self.down: set[int] = set()
        self.calls: list[tuple[int, int, Any]] = []
        self.alter_errors: dict[TopicPartition, tuple[ErrorCode, str]] = {}
        self.election: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}

    def __call__(
        self, host: str, port: int, api_key: int, version: int, body: Any, **kw: Any
    ) -> Any:
        self.calls.append((port, api_key, body))
        broker = port - 9000
        if broker in self.down:
            raise ConnectionRefusedError(f"connection to {host}:{port} refused")
        is_controller = broker == self.controller
        cls = registry.response_class(api_key, version)
        if api_key == 3:
            return self._metadata(cls)
        if not is_controller:
            fields = {
                "throttle_time": ZERO,
                "error_code": ErrorCode.not_controller,
                "error_message": None,
                "responses": (),
                "topics": (),
                "replica_election_results": (),
            }
            # one answer shape for three APIs: keep the fields this message has
            names = {f.name for f in dataclasses.fields(cls)}
            return registry.build(cls, **{k: v for k, v in fields.items() if k in names})
        if api_key == 46:
            return self._list(cls, body)
        if api_key == 45:
            return self._alter(cls, body)
        if api_key == 43:
            return self._elect(cls, body)
        raise AssertionError(api_key)

    def _metadata(self, cls: Any) -> Any:
        b_cls = registry.nested(cls, "MetadataResponseBroker")
        t_cls = registry.nested(cls, "MetadataResponseTopic")
        p_cls = registry.nested(cls, "MetadataResponsePartition")
        topics: dict[str, list[Any]] = {}
        for tp, r in sorted(self.replicas.items()):
            topics.setdefault(tp.topic, []).append(
                registry.build(
                    p_cls,
                    error_code=ErrorCode.none,
                    partition_index=tp.partition,
                    leader_id=r[0],
                    replica_nodes=tuple(r),
                    isr_nodes=tuple(r),
                )
            )
        return registry.build(
            cls,
            throttle_time=ZERO,
            brokers=tuple(
                registry.build(
                    b_cls, node_id=b, host="127.0.0.1", port=9000 + b, rack=self.racks.get(b)
                )
                for b in (1, 2, 3)
            ),
            cluster_id="c",
            controller_id=self.controller,
            topics=tuple(
                registry.build(
                    t_cls, error_code=ErrorCode.none, name=n, topic_id=None, partitions=tuple(ps)
                )
                for n, ps in topics.items()
            ),
        )

    def _list(self, cls: Any, body: Any) -> Any:
        t_cls = registry.nested(cls, "OngoingTopicReassignment")
        p_cls = registry.nested(cls, "OngoingPartitionReassignment")
        wanted = (
            None
            if body.topics is None
            else {TP(t.name, p) for t in body.topics for p in t.partition_indexes}
        )
        topics: dict[str, list[Any]] = {}
        for tp, (r, a, rm) in sorted(self.ongoing.items()):
            if wanted is None or tp in wanted:
                topics.setdefault(tp.topic, []).append(
                    registry.build(
                        p_cls,
                        partition_index=tp.partition,
                        replicas=tuple(r),
                        adding_replicas=tuple(a),
                        removing_replicas=tuple(rm),
                    )
                )
        return registry.build(
            cls,
            throttle_time=ZERO,
            error_code=ErrorCode.none,
            error_message=None,
            topics=tuple(
                registry.build(t_cls, name=n, partitions=tuple(ps)) for n, ps in topics.items()
            ),
        )

    def _alter(self, cls: Any, body: Any) -> Any:
        t_cls = registry.nested(cls, "ReassignableTopicResponse")
        p_cls = registry.nested(cls, "ReassignablePartitionResponse")
        out = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                code, msg = self.alter_errors.get(
                    TP(t.name, p.partition_index), (ErrorCode.none, None)
                )
                parts.append(
                    registry.build(
                        p_cls, partition_index=p.partition_index, error_code=code, error_message=msg
                    )
                )
            out.append(registry.build(t_cls, name=t.name, partitions=tuple(parts)))
        return registry.build(
            cls,
            throttle_time=ZERO,
            error_code=ErrorCode.none,
            error_message=None,
            responses=tuple(out),
        )

    def _elect(self, cls: Any, body: Any) -> Any:
        t_cls = registry.nested(cls, "ReplicaElectionResult")
        p_cls = registry.nested(cls, "PartitionResult")
        if body.topic_partitions is None:
            tps = sorted(self.election)
        else:
            tps = [TP(t.topic, p) for t in body.topic_partitions for p in t.partitions]
        topics: dict[str, list[Any]] = {}
        for tp in tps:
            code, msg = self.election.get(tp, (ErrorCode.unknown_topic_or_partition, "unknown"))
            topics.setdefault(tp.topic, []).append(
                registry.build(p_cls, partition_id=tp.partition, error_code=code, error_message=msg)
            )
        return registry.build(
            cls,
            throttle_time=ZERO,
            error_code=ErrorCode.none,
            replica_election_results=tuple(
                registry.build(t_cls, topic=n, partition_result=tuple(ps))
                for n, ps in topics.items()
            ),
        )


def client(cluster: FakeCluster, bootstrap: str = "127.0.0.1:9001") -> ra.ClusterClient:
    return ra.ClusterClient(bootstrap, 5.0, requester=cluster, sleep=lambda _s: None)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    """A fake cluster installed as ``request_sync`` and as the bootstrap servers."""
    fake = FakeCluster(
        {TP("t", 0): [1, 2], TP("t", 1): [2, 3], TP("u", 0): [3, 1]},
    )
    import broker.network.client as net

    monkeypatch.setattr(net, "request_sync", fake)
    monkeypatch.setenv("MILLRACE_BOOTSTRAP", "127.0.0.1:9001,127.0.0.1:9003")
    monkeypatch.setattr(ra.time, "sleep", lambda _s: None)
    return fake


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def reassignment(entries: list[tuple[str, int, list[int]]]) -> dict[str, Any]:
    return {
        "version": 1,
        "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries],
    }


# --- argument parsing --------------------------------------------------------------------


def test_parse_bootstrap() -> None:
    assert ra.parse_bootstrap("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    for bad in ("a", "a:x", ":1", ""):
        with pytest.raises(CliError, match="--bootstrap-server"):
            ra.parse_bootstrap(bad)


def test_parse_broker_list() -> None:
    assert ra.parse_broker_list("1, 2,3") == [1, 2, 3]
    with pytest.raises(CliError, match="--broker-list.*'x' is not a broker id"):
        ra.parse_broker_list("1,x")
    with pytest.raises(CliError, match="--broker-list.*broker 1 is listed more than once"):
        ra.parse_broker_list("1,2,1")
    with pytest.raises(CliError, match="--broker-list.*negative"):
        ra.parse_broker_list("-1")


def reassign_args(*argv: str) -> Any:
    return build_parser().parse_args(["reassign", *argv])


def test_reassign_action_options() -> None:
    args = reassign_args("--generate", "--topics-to-move-json-file", "f", "--broker-list", "1")
    assert ra.action_of(args) == "generate"
    assert ra.action_of(reassign_args("--verify", "--reassignment-json-file", "f")) == "verify"
    assert ra.action_of(reassign_args("--list")) == "list"
    with pytest.raises(CliError, match="--generate needs --broker-list"):
        ra.action_of(reassign_args("--generate", "--topics-to-move-json-file", "f"))
    with pytest.raises(CliError, match="--execute needs --reassignment-json-file"):
        ra.action_of(reassign_args("--execute"))
    with pytest.raises(CliError, match="--broker-list can only be used with --generate"):
        ra.action_of(
            reassign_args("--execute", "--reassignment-json-file", "f", "--broker-list", "1")
        )
    with pytest.raises(CliError, match="--additional can only be used with --execute"):
        ra.action_of(reassign_args("--verify", "--reassignment-json-file", "f", "--additional"))


def test_reassign_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["reassign", "--bootstrap-server", "h:1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["reassign", "--execute", "--verify", "--reassignment-json-file", "f"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["reassign", "--execute"])
    assert exc.value.code == 2
    assert "--execute needs --reassignment-json-file" in capsys.readouterr().err


def test_elect_leaders_options(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["elect-leaders", "--election-type", "PREFERRED", "--topic", "t"])
    assert args.election_type == 0 and args.topic == "t" and args.partition is None
    args = parser.parse_args(
        ["elect-leaders", "--election-type", "unclean", "--all-topic-partitions"]
    )
    assert args.election_type == 1 and args.all_topic_partitions
    for argv in (
        ["--all-topic-partitions"],  # no election type
        ["--election-type", "fastest", "--all-topic-partitions"],
        ["--election-type", "preferred"],  # nothing selected
        ["--election-type", "preferred", "--all-topic-partitions", "--topic", "t"],
    ):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["elect-leaders", *argv])
        assert exc.value.code == 2
    assert "invalid election type 'fastest'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "elect-leaders",
                "--election-type",
                "preferred",
                "--path-to-json-file",
                "f",
                "--partition",
                "1",
            ]
        )
    assert exc.value.code == 2
    assert "--partition needs --topic" in capsys.readouterr().err


def test_parse_election_json() -> None:
    text = json.dumps(
        {"partitions": [{"topic": "t", "partition": 1}, {"topic": "u", "partition": 0}]}
    )
    assert el.parse_partitions_json(text) == [TP("t", 1), TP("u", 0)]
    dup = json.dumps({"partitions": [{"topic": "t", "partition": 1}] * 2})
    with pytest.raises(CliError, match="duplicate partitions: t-1"):
        el.parse_partitions_json(dup)
    with pytest.raises(CliError, match="--path-to-json-file: not valid JSON"):
        el.parse_partitions_json("{")
    with pytest.raises(CliError, match="partitions\\[0\\] has no valid partition number"):
        el.parse_partitions_json(json.dumps({"partitions": [{"topic": "t", "partition": "1"}]}))
    with pytest.raises(CliError, match="empty"):
        el.parse_partitions_json(json.dumps({"partitions": []}))
    with pytest.raises(CliError, match="expected"):
        el.parse_partitions_json(json.dumps([1]))


# --- formatting --------------------------------------------------------------------------


def test_format_generate_and_rollback() -> None:
    current = {TP("t", 1): [2, 3], TP("t", 0): [1, 2]}
    proposed = {TP("t", 0): [3, 1], TP("t", 1): [1, 2]}
    text = ra.format_generate(current, proposed)
    lines = text.split("\n")
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"][0] == {
        "topic": "t",
        "partition": 0,
        "replicas": [1, 2],
        "log_dirs": ["any", "any"],
    }
    assert lines[2] == ""
    assert lines[3] == "Proposed partition reassignment configuration"
    assert [p["replicas"] for p in json.loads(lines[4])["partitions"]] == [[3, 1], [1, 2]]
    rollback = ra.format_rollback(current).split("\n")
    assert rollback[0] == "Current partition replica assignment"
    assert rollback[1] == ""
    assert json.loads(rollback[2])["version"] == 1
    assert rollback[4] == "Save this to use as the --reassignment-json-file option during rollback"


def test_format_started_and_cancelled() -> None:
    assert ra.format_started([TP("t", 1), TP("t", 0)]) == (
        "Successfully started partition reassignments for t-0,t-1\n"
    )
    assert (
        ra.format_started([TP("t", 0)]) == "Successfully started partition reassignment for t-0\n"
    )
    assert ra.format_cancelled([]) == "None of the specified partition reassignments are active.\n"
    assert ra.format_cancelled([TP("u", 0), TP("t", 2)]) == (
        "Successfully cancelled partition reassignment(s) for: t-2,u-0\n"
    )


def test_verify_states_and_output() -> None:
    targets = {TP("t", 0): [2, 3], TP("t", 1): [3, 1], TP("t", 2): [1, 2]}
    ongoing = {TP("t", 1): ([3, 1, 2], [1], [2])}
    current = {TP("t", 0): [2, 3], TP("t", 1): [3, 1, 2], TP("t", 2): [2, 1]}
    text, complete = ra.format_verify(ra.reassignment_states(targets, ongoing, current))
    assert not complete
    assert text.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is still in progress.",
        "There is no active reassignment of partition t-2, but replica set is [2, 1] rather "
        "than [1, 2].",
    ]
    text, complete = ra.format_verify(ra.reassignment_states({TP("t", 0): [2, 3]}, {}, current))
    assert complete
    with pytest.raises(CliError, match="Unable to find partition: t-9"):
        ra.reassignment_states({TP("t", 9): [1]}, {}, current)


def test_format_list() -> None:
    assert ra.format_list({}) == "No partition reassignments found.\n"
    assert ra.format_list({TP("t", 0): ([2, 3, 1], [3], [1]), TP("a", 1): ([1, 2], [2], [])}) == (
        "Current partition reassignments:\n"
        "a-1: replicas: 1,2. adding: 2. removing: .\n"
        "t-0: replicas: 2,3,1. adding: 3. removing: 1.\n"
    )


def test_election_outcome_formatting() -> None:
    cluster = FakeCluster({})
    cluster.election = {
        TP("t", 1): (ErrorCode.none, None),
        TP("t", 0): (ErrorCode.none, None),
        TP("t", 2): (ErrorCode.election_not_needed, "Leader election not needed"),
        TP("t", 3): (ErrorCode.preferred_leader_not_available, "preferred replica 3 is offline"),
        TP("t", 4): (ErrorCode.eligible_leaders_not_available, None),
    }
    response = cluster("h", 9002, 43, 2, el.elect_request(0, [TP("t", p) for p in range(5)]))
    outcome = el.classify(response)
    assert outcome.succeeded == [TP("t", 0), TP("t", 1)]
    assert outcome.noop == [TP("t", 2)]
    assert el.format_outcome(0, outcome).splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
        "Valid replica already elected for partitions t-2",
        "Error completing leader election (PREFERRED) for partition: t-3: preferred replica 3 "
        "is offline",
        "Error completing leader election (PREFERRED) for partition: t-4: "
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    ]
    assert el.format_outcome(1, el.ElectionOutcome(succeeded=[TP("u", 0)])) == (
        "Successfully completed leader election (UNCLEAN) for partitions u-0\n"
    )


def test_elect_request_shape() -> None:
    body = el.elect_request(1, [TP("u", 0), TP("t", 2), TP("t", 1)])
    assert body.election_type == 1
    assert [(t.topic, list(t.partitions)) for t in body.topic_partitions] == [
        ("t", [1, 2]),
        ("u", [0]),
    ]
    assert el.elect_request(0, None).topic_partitions is None
    registry.encode(body)  # valid on the wire


def test_responses_with_top_level_errors_raise() -> None:
    cluster = FakeCluster({})
    not_ctl = cluster("h", 9001, 45, 0, ra.alter_request({TP("t", 0): [1]}))
    with pytest.raises(CliError, match="NOT_CONTROLLER"):
        ra.alter_errors(not_ctl)
    with pytest.raises(CliError, match="NOT_CONTROLLER"):
        ra.ongoing_reassignments(cluster("h", 9001, 46, 0, ra.list_request(None)))
    with pytest.raises(CliError, match="NOT_CONTROLLER"):
        el.classify(cluster("h", 9001, 43, 2, el.elect_request(0, None)))


# --- the controller client -----------------------------------------------------------------


def test_cluster_view_from_metadata() -> None:
    fake = FakeCluster({TP("t", 0): [1, 2]}, racks={1: "r1"})
    view = client(fake).metadata()
    assert view.controller_id == 2
    assert view.brokers[1].rack == "r1" and view.brokers[2].rack is None
    assert view.brokers[3].port == 9003
    assert view.replicas == {TP("t", 0): [1, 2]}


def test_metadata_tries_the_next_bootstrap_server() -> None:
    fake = FakeCluster({})
    fake.down = {1}
    view = client(fake, "127.0.0.1:9001,127.0.0.1:9003").metadata()
    assert view.controller_id == 2
    assert [c[0] for c in fake.calls] == [9001, 9003]
    fake.down = {1, 3}
    with pytest.raises(CliError, match="cannot reach any broker of --bootstrap-server"):
        client(fake, "127.0.0.1:9001,127.0.0.1:9003").metadata()


def test_controller_requests_go_to_the_controller_and_retry() -> None:
    fake = FakeCluster({})
    c = client(fake)
    c.to_controller(46, 0, ra.list_request(None))
    assert [(port, key) for port, key, _b in fake.calls] == [(9001, 3), (9002, 46)]

    # the controller moved to 3: broker 2 answers NOT_CONTROLLER, fresh metadata finds 3
    fake.calls.clear()
    fake.controller = 3
    stale = [2]

    def stale_metadata(
        host: str, port: int, api_key: int, version: int, body: Any, **kw: Any
    ) -> Any:
        response = fake(host, port, api_key, version, body, **kw)
        if api_key == 3 and stale:
            return dataclasses.replace(response, controller_id=stale.pop())
        return response

    c2 = ra.ClusterClient("127.0.0.1:9001", 5.0, requester=stale_metadata, sleep=lambda _s: None)
    ongoing = ra.ongoing_reassignments(c2.to_controller(46, 0, ra.list_request(None)))
    assert ongoing == {}
    assert [(port, key) for port, key, _b in fake.calls] == [
        (9001, 3),
        (9002, 46),
        (9001, 3),
        (9003, 46),
    ]


def test_controller_retries_are_bounded() -> None:
    fake = FakeCluster({}, controller=2)
    fake.down = {2}
    sleeps: list[float] = []
    c = ra.ClusterClient("127.0.0.1:9001", 5.0, requester=fake, sleep=sleeps.append, attempts=3)
    with pytest.raises(CliError, match="after 3 attempts: controller 2 unreachable"):
        c.to_controller(46, 0, ra.list_request(None))
    assert sleeps == [1.0, 1.0]


# --- whole commands against the fake cluster -----------------------------------------------


def test_generate_command(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": "t"}]})
    rc = main(["reassign", "--generate", "--topics-to-move-json-file", f, "--broker-list", "3,1"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert out[0] == "Current partition replica assignment"
    assert [p["replicas"] for p in json.loads(out[1])["partitions"]] == [[1, 2], [2, 3]]
    assert out[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(out[4])["partitions"]
    assert [p["partition"] for p in proposed] == [0, 1]
    assert all(sorted(p["replicas"]) == [1, 3] for p in proposed)


def test_generate_errors(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": "nope"}]})
    assert (
        main(["reassign", "--generate", "--topics-to-move-json-file", f, "--broker-list", "1,2"])
        == 1
    )
    assert (
        "millrace reassign: --topics-to-move-json-file: topic nope not found"
        in capsys.readouterr().err
    )
    f = write(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": "t"}]})
    assert (
        main(["reassign", "--generate", "--topics-to-move-json-file", f, "--broker-list", "1,7"])
        == 1
    )
    assert "--broker-list: unknown broker id(s) 7" in capsys.readouterr().err
    cluster.racks = {1: "a"}
    assert (
        main(["reassign", "--generate", "--topics-to-move-json-file", f, "--broker-list", "1,2"])
        == 1
    )
    assert "--disable-rack-aware" in capsys.readouterr().err
    assert (
        main(
            [
                "reassign",
                "--generate",
                "--topics-to-move-json-file",
                f,
                "--broker-list",
                "1,2",
                "--disable-rack-aware",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "reassign",
                "--generate",
                "--topics-to-move-json-file",
                str(tmp_path / "missing"),
                "--broker-list",
                "1",
            ]
        )
        == 1
    )
    assert "--topics-to-move-json-file" in capsys.readouterr().err


def test_execute_command(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "r.json", reassignment([("t", 0, [2, 3]), ("u", 0, [1, 2, 3])]))
    rc = main(["reassign", "--execute", "--reassignment-json-file", f])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    lines = captured.out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert {p["topic"]: p["replicas"] for p in json.loads(lines[2])["partitions"]} == {
        "t": [1, 2],
        "u": [3, 1],
    }
    assert lines[4] == "Save this to use as the --reassignment-json-file option during rollback"
    assert lines[5] == "Successfully started partition reassignments for t-0,u-0"
    alters = [b for port, key, b in cluster.calls if key == 45]
    assert [port for port, key, _b in cluster.calls if key in (45, 46)] == [9002, 9002]
    assert [
        (t.name, [(p.partition_index, list(p.replicas)) for p in t.partitions])
        for t in alters[0].topics
    ] == [
        ("t", [(0, [2, 3])]),
        ("u", [(0, [1, 2, 3])]),
    ]


def test_execute_refusals(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "r.json", reassignment([("t", 5, [2, 3])]))
    assert main(["reassign", "--execute", "--reassignment-json-file", f]) == 1
    assert "Unable to find partition: t-5" in capsys.readouterr().err
    f = write(tmp_path, "r.json", reassignment([("t", 0, [2, 9])]))
    assert main(["reassign", "--execute", "--reassignment-json-file", f]) == 1
    assert "unknown broker id(s) 9" in capsys.readouterr().err
    f = write(tmp_path, "r.json", reassignment([("t", 0, [2, 2])]))
    assert main(["reassign", "--execute", "--reassignment-json-file", f]) == 1
    assert "duplicate entries" in capsys.readouterr().err
    f = write(tmp_path, "r.json", reassignment([("t", 0, [2, 3])]))
    cluster.ongoing = {TP("u", 0): ([3, 1, 2], [2], [])}
    assert main(["reassign", "--execute", "--reassignment-json-file", f]) == 1
    assert "Use --additional" in capsys.readouterr().err
    cluster.alter_errors = {TP("t", 0): (ErrorCode.invalid_replica_assignment, "broker 3 is down")}
    assert main(["reassign", "--execute", "--reassignment-json-file", f, "--additional"]) == 1
    captured = capsys.readouterr()
    assert "Save this to use" in captured.out
    assert captured.err == "Error reassigning partition:\nt-0: broker 3 is down\n"


def test_verify_command(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "r.json", reassignment([("t", 0, [1, 2]), ("t", 1, [3, 1])]))
    cluster.ongoing = {TP("t", 1): ([3, 1, 2], [1], [2])}
    assert main(["reassign", "--verify", "--reassignment-json-file", f]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is still in progress.",
    ]
    cluster.ongoing = {}
    cluster.replicas[TP("t", 1)] = [3, 1]
    assert main(["reassign", "--verify", "--reassignment-json-file", f]) == 0
    assert capsys.readouterr().out.endswith("Reassignment of partition t-1 is completed.\n")


def test_cancel_and_list_commands(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "r.json", reassignment([("t", 0, [1, 3]), ("t", 1, [3, 1])]))
    cluster.ongoing = {TP("t", 1): ([3, 1, 2], [1], [2])}
    assert main(["reassign", "--list"]) == 0
    assert capsys.readouterr().out == (
        "Current partition reassignments:\nt-1: replicas: 3,1,2. adding: 1. removing: 2.\n"
    )
    assert main(["reassign", "--cancel", "--reassignment-json-file", f]) == 0
    assert capsys.readouterr().out == "Successfully cancelled partition reassignment(s) for: t-1\n"
    alter = next(b for _p, key, b in cluster.calls if key == 45)
    assert [(p.partition_index, p.replicas) for t in alter.topics for p in t.partitions] == [
        (1, None)
    ]
    cluster.ongoing = {}
    assert main(["reassign", "--cancel", "--reassignment-json-file", f]) == 0
    assert capsys.readouterr().out == "None of the specified partition reassignments are active.\n"


def test_elect_leaders_command(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.election = {
        TP("t", 0): (ErrorCode.none, None),
        TP("t", 1): (ErrorCode.election_not_needed, None),
        TP("u", 0): (ErrorCode.election_not_needed, None),
    }
    assert main(["elect-leaders", "--election-type", "preferred", "--topic", "t"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions t-0",
        "Valid replica already elected for partitions t-1",
    ]
    body = next(b for p, key, b in cluster.calls if key == 43 and p == 9002)
    assert [(t.topic, list(t.partitions)) for t in body.topic_partitions] == [("t", [0, 1])]

    assert main(["elect-leaders", "--election-type", "preferred", "--all-topic-partitions"]) == 0
    assert "Valid replica already elected for partitions t-1, u-0" in capsys.readouterr().out

    assert (
        main(["elect-leaders", "--election-type", "unclean", "--topic", "t", "--partition", "7"])
        == 1
    )
    captured = capsys.readouterr()
    assert (
        captured.out == "Error completing leader election (UNCLEAN) for partition: t-7: unknown\n"
    )
    assert "1 replica(s) could not be elected" in captured.err

    f = write(tmp_path, "e.json", {"partitions": [{"topic": "u", "partition": 0}]})
    assert main(["elect-leaders", "--election-type", "preferred", "--path-to-json-file", f]) == 0
    assert capsys.readouterr().out == "Valid replica already elected for partitions u-0\n"

    assert main(["elect-leaders", "--election-type", "preferred", "--topic", "nope"]) == 1
    assert "--topic nope: topic not found" in capsys.readouterr().err


def test_dir_option_reads_cluster_json(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"bootstrap_servers": "127.0.0.1:9003"}))
    assert main(["reassign", "--dir", str(tmp_path), "--list"]) == 0
    assert cluster.calls[0][0] == 9003
    assert main(["reassign", "--dir", str(tmp_path / "none"), "--list"]) == 1
    assert "cluster.json not found" in capsys.readouterr().err

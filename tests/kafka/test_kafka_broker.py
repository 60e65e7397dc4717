"""The embedded-broker launcher: ready means answering, stop means gone, clashes are caught."""

from __future__ import annotations

import socket

import pytest

from services import broker as broker_module
from services.state_file import StateFile
from services.broker import (
    BrokerError,
    EmbeddedBroker,
    broker_answers,
    free_loopback_port,
    process_alive,
)


def test_start_answers_an_admin_request_and_stop_leaves_no_process(kafka_broker_kind):
    broker = EmbeddedBroker(kind=kafka_broker_kind)
    with broker:
        pid = broker.pid
        data_dir = broker.data_dir
        assert process_alive(pid)
        assert broker_answers(broker.bootstrap_servers)
    assert not process_alive(pid)
    assert broker.pid is None
    assert not broker_answers(f"127.0.0.1:{broker.port}", timeout_seconds=1.0)
    import os
    assert not os.path.exists(data_dir)


def test_a_port_taken_by_another_process_is_reported_not_mistaken_for_the_broker(
        kafka_broker_kind):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(8)  # accepts connections, speaks no Kafka
        port = squatter.getsockname()[1]
        broker = EmbeddedBroker(kind=kafka_broker_kind, port=port)
        with pytest.raises(BrokerError, match="exited during start-up|did not answer"):
            broker.start()
        assert broker.pid is None  # whatever was started has been stopped


def test_the_command_line_starts_reports_and_stops_the_broker(kafka_broker_kind, tmp_path,
                                                             capsys):
    state_dir = str(tmp_path / "state")
    assert broker_module.main(["start", "--kind", kafka_broker_kind,
                               "--state-dir", state_dir]) == 0
    started = capsys.readouterr().out
    assert "--bootstrap_servers=127.0.0.1:" in started
    state = StateFile(tmp_path / "state", broker_module.STATE_FILE_NAME).read()
    try:
        assert broker_module.main(["status", "--state-dir", state_dir]) == 0
        assert state["bootstrap_servers"] in capsys.readouterr().out
    finally:
        assert broker_module.main(["stop", "--state-dir", state_dir]) == 0
    assert not process_alive(state["pid"])
    assert broker_module.main(["status", "--state-dir", state_dir]) == 1


def test_invalid_launcher_arguments_are_rejected():
    with pytest.raises(ValueError, match="kafka"):
        EmbeddedBroker(kind="kafka")
    with pytest.raises(ValueError, match="port"):
        EmbeddedBroker(port=70000)


def test_a_free_port_is_a_loopback_port_nobody_listens_on():
    port = free_loopback_port()
    assert not broker_answers(f"127.0.0.1:{port}", timeout_seconds=1.0)

"""Route handlers for status, agent, namespaces, variables and task logs."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

from . import views
from .cluster import VariableRecord
from .problems import Problems, check_scalar
from .protocol import HTTPError, Reply, RequestContext


class MiscRoutes(RequestContext):
    def op_get_status_leader(self) -> Reply:
        return Reply("127.0.0.1:4647")

    def _agent_self(self) -> Reply:
        # Not in the OpenAPI description: a minimal subset of Nomad's answer, checked by hand.
        cluster = self.cluster
        return Reply(
            {
                "config": {
                    "Region": cluster.region,
                    "Datacenter": cluster.datacenter,
                    "NodeName": cluster.node_name,
                    "Version": {"Version": "1.9.7", "VersionPrerelease": "", "VersionMetadata": ""},
                    "ACL": {"Enabled": self.double.token is not None},
                },
                "member": {
                    "Name": f"{cluster.node_name}.{cluster.region}",
                    "Addr": "127.0.0.1",
                    "Port": 4648,
                    "Status": "alive",
                    "Tags": {"region": cluster.region, "dc": cluster.datacenter, "role": "nomad"},
                },
                "stats": {},
            }
        )

    def op_get_status_peers(self) -> Reply:
        return Reply(["127.0.0.1:4647"])

    def op_get_regions(self) -> Reply:
        return Reply([self.cluster.region])

    def _namespace_view(self, name: str) -> dict[str, Any]:
        return {"Name": name, "Description": "", "Meta": {}, "CreateIndex": 1, "ModifyIndex": 1}

    def op_get_namespaces(self) -> Reply:
        return Reply([self._namespace_view(n) for n in sorted(self.double.namespaces)])

    def op_get_namespace(self, namespace_name: str) -> Reply:
        if namespace_name not in self.double.namespaces:
            raise HTTPError(404, "Namespace not found")
        return Reply(self._namespace_view(namespace_name))

    # -- variables ---------------------------------------------------------------------------

    def op_get_variable_query(self, path: str) -> Reply:
        self._blocking()
        with self.cluster.lock:
            record = self.cluster.variables.get((self.namespace, path))
            if record is None:
                raise HTTPError(404, "variable not found")
            return Reply(views.variable_view(record))

    def op_get_variables_list_request(self) -> Reply:
        self._blocking()
        prefix = self.q("prefix")
        with self.cluster.lock:
            return Reply(
                [
                    views.variable_view(r, items=False)
                    for (namespace, var_path), r in sorted(self.cluster.variables.items())
                    if var_path.startswith(prefix) and self.namespace in ("*", namespace)
                ]
            )

    def _cas(self, record: VariableRecord | None) -> None:
        cas = self.q("cas")
        if not cas:
            return
        current = 0 if record is None else record.modify_index
        if int(cas) != current:
            body = views.variable_view(record) if record is not None else None
            raise HTTPError(409, "cas conflict", body)

    def _put_variable(self, path: str) -> Reply:
        body = self.body if isinstance(self.body, dict) else {}
        if body.get("Path") and body["Path"] != path:
            raise HTTPError(400, "variable path in body does not match the URL")
        items = body.get("Items")
        if not items:
            raise HTTPError(400, "variable missing required Items object")
        namespace = body.get("Namespace") or self.namespace
        with self.cluster.lock:
            key = (namespace, path)
            record = self.cluster.variables.get(key)
            self._cas(record)
            index = self.cluster.bump()
            self.cluster.variables_version += 1
            now = time.time_ns()
            if record is None:
                record = VariableRecord(namespace, path, dict(items), index, index, now, now)
                self.cluster.variables[key] = record
            else:
                record.items = dict(items)
                record.modify_index = index
                record.modify_time = now
            return Reply(views.variable_view(record))

    def op_put_variable(self, path: str) -> Reply:
        return self._put_variable(path)

    def op_post_variable(self, path: str) -> Reply:
        return self._put_variable(path)

    def op_delete_variable(self, path: str) -> Reply:
        with self.cluster.lock:
            key = (self.namespace, path)
            record = self.cluster.variables.get(key)
            self._cas(record)
            if record is not None:
                del self.cluster.variables[key]
                self.cluster.variables_version += 1
                self.cluster.bump()
        return Reply(None)

    # -- logs (not in the OpenAPI description: validated here by hand) -------------------------

    def _logs(self, alloc_id: str) -> Reply:
        known = {
            "task": "string",
            "type": "string",
            "follow": "boolean",
            "offset": "integer",
            "origin": "string",
            "plain": "boolean",
            "namespace": "string",
            "region": "string",
        }
        problems = Problems()
        for name, values in self.query.items():
            if name not in known:
                problems.unknown.append(
                    f"query parameter {name!r} is not one the logs endpoint reads"
                )
                continue
            for text in values:
                problems.errors.extend(check_scalar(name, known[name], text))
        self._report(problems)
        task = self.q("task")
        if not task:
            raise HTTPError(400, "must provide task name")
        kind = self.q("type")
        if kind not in ("stdout", "stderr"):
            raise HTTPError(400, "must provide log type (stdout/stderr)")
        origin = self.q("origin", "start")
        if origin not in ("start", "end"):
            raise HTTPError(400, "origin must be start or end")
        offset = int(self.q("offset", "0"))
        follow, plain = self.q_bool("follow"), self.q_bool("plain")
        with self.cluster.lock:
            alloc = self.cluster.allocations.get(alloc_id)
            if alloc is None:
                raise HTTPError(404, f'Unknown allocation "{alloc_id}"')
            runner = alloc.tasks.get(task)
            if runner is None:
                raise HTTPError(400, f'task "{task}" not found in allocation')
        log_path = runner.log_path(kind)
        size = log_path.stat().st_size if log_path.exists() else 0
        start = max(0, size - offset) if origin == "end" else min(offset, size)
        file_name = f"alloc/logs/{task}.{kind}.0"

        def frame(data: bytes, position: int) -> bytes:
            if plain:
                return data
            frame_obj = {
                "Data": base64.b64encode(data).decode(),
                "File": file_name,
                "Offset": position,
            }
            return json.dumps(frame_obj).encode()

        def read_from(position: int) -> tuple[bytes, int]:
            if not log_path.exists():
                return b"", position
            with log_path.open("rb") as handle:
                handle.seek(position)
                data = handle.read()
            return data, position + len(data)

        if not follow:
            data, end = read_from(start)
            return Reply(raw=frame(data, end) if data else b"")

        def stream(write: Callable[[bytes], None]) -> None:
            position = start
            quiet_since = time.monotonic()
            while True:
                data, position = read_from(position)
                if data:
                    write(frame(data, position))
                    quiet_since = time.monotonic()
                elif not plain and time.monotonic() - quiet_since >= 1.0:
                    # Nomad's framer sends an empty frame each second without data, so a
                    # client's read timeout does not fire on a quiet task.
                    write(b"{}")
                    quiet_since = time.monotonic()
                with self.cluster.lock:
                    finished = alloc.terminal() or self.cluster.closed
                if finished:
                    data, position = read_from(position)
                    write(frame(data, position) if data else b"")
                    return
                time.sleep(0.1)  # poll the file like Nomad's client does, between reads

        return Reply(stream=stream)

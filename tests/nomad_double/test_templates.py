"""The double's interpolation and template subset, without processes."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from nomad_double.templates import (
    MissingVariableError,
    TemplateError,
    interpolate,
    parse_env_file,
    render,
)

VARS = {"nomad/jobs/j": {"user": "u1", "password": "p w"}}


def lookup(path: str) -> Mapping[str, str]:
    if path not in VARS:
        raise MissingVariableError(path)
    return VARS[path]


def test_interpolation_of_env_node_and_meta() -> None:
    env = {"NOMAD_ALLOC_INDEX": "2", "NOMAD_META_run_id": "r1"}
    node = {"node.datacenter": "dc1", "meta.rack": "r7"}
    text = (
        "w-${NOMAD_ALLOC_INDEX} ${NOMAD_META_run_id} ${node.datacenter} ${meta.rack}"
        ' ${env["NOMAD_ALLOC_INDEX"]}'
    )
    assert interpolate(text, env, node) == "w-2 r1 dc1 r7 2"
    assert interpolate("${meta.run_id} ${nope}", env, node) == "${meta.run_id} ${nope}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('{{ with nomadVar "nomad/jobs/j" }}U={{ .user }}{{ end }}', "U=u1"),
        (
            '{{ range $k, $v := nomadVar "nomad/jobs/j" }}{{ $k }}={{ $v }}\n{{ end }}',
            "password=p w\nuser=u1\n",
        ),
        (
            '{{ range nomadVar "nomad/jobs/j" }}{{ .Key }}:{{ .Value }};{{ end }}',
            "password:p w;user:u1;",
        ),
        (
            '{{- with nomadVar "nomad/jobs/j" -}}\n'
            "{{ range $k, $v := . }}{{ $k }} {{ end }}\n{{- end }}",
            "password user ",
        ),
        ('A={{ env "HOME" }}{{/* comment */}}', "A=/home/x"),
    ],
)
def test_the_supported_subset_renders(source: str, expected: str) -> None:
    assert render(source, lookup, {"HOME": "/home/x"}) == expected


def test_a_missing_variable_blocks_and_unsupported_syntax_is_loud() -> None:
    with pytest.raises(MissingVariableError) as missing:
        render('{{ with nomadVar "nomad/jobs/other" }}{{ end }}', lookup, {})
    assert missing.value.path == "nomad/jobs/other"
    for source in (
        '{{ key "consul/k" }}',
        '{{ with nomadVar "nomad/jobs/j" }}{{ .nope }}{{ end }}',
        "{{ end }}",
        "{{ with . }}",
    ):
        with pytest.raises(TemplateError):
            render(source, lookup, {})


def test_env_files_parse_as_nomad_reads_them() -> None:
    text = '# creds\nexport A=1\nB="two words"\n\nC=x=y\n'
    assert parse_env_file(text) == {"A": "1", "B": "two words", "C": "x=y"}
    with pytest.raises(TemplateError):
        parse_env_file("no equals sign")

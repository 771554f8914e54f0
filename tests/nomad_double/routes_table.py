"""Nomad's HTTP API as the double routes it: every operation of Nomad's v1 API with its
method, path, operation ID, the query parameters it reads (with their types) and the API
types of its request and response bodies.

Transcribed from HashiCorp's published description of the v1 API (hashicorp/nomad-openapi);
the body type names are those of Nomad's Go API (``github.com/hashicorp/nomad/api``), which
``apicheck/`` decodes against. The double implements a subset (``op_<operation>`` handlers);
a known operation without a handler answers 501, an unknown path 404.

Known errata of that description, corrected here:
- ``DELETE /var/{path}`` declares a body; Nomad reads none (python-nomad sends none).
- Blocking queries: ``index`` is a query parameter (the description has a header).
- ``filter``/``meta``/``reverse`` are read by Nomad but not declared (``EXTRA_QUERY``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

Query = dict[str, str]  # parameter name -> "string" | "integer" | "boolean"

READ: Query = {
    "region": "string",
    "namespace": "string",
    "wait": "string",
    "stale": "string",
    "prefix": "string",
    "per_page": "integer",
    "next_token": "string",
}
"""What every read (GET) takes: region, namespace, blocking and paging parameters."""
WRITE: Query = {"region": "string", "namespace": "string", "idempotency_token": "string"}
"""What every write takes."""
EXTRA_QUERY: Query = {
    "index": "integer",
    "wait": "string",
    "filter": "string",
    "meta": "boolean",
    "reverse": "boolean",
}
"""Read by Nomad on any request, missing from the description (see the module doc)."""


@dataclass(frozen=True)
class Route:
    """One operation: ``request``/``response`` name a Go API type (``[]T`` a list of T;
    ``string`` a JSON string), ``None`` for no JSON body."""

    method: str
    template: str
    operation_id: str
    query: Query = field(default_factory=dict)
    request: str | None = None
    response: str | None = None


ROUTES: tuple[Route, ...] = (
    Route("POST", "/acl/bootstrap", "PostACLBootstrap", WRITE, response="ACLToken"),
    Route("GET", "/acl/policies", "GetACLPolicies", READ, response="[]ACLPolicyListStub"),
    Route("DELETE", "/acl/policy/{policyName}", "DeleteACLPolicy", WRITE),
    Route("GET", "/acl/policy/{policyName}", "GetACLPolicy", READ, response="ACLPolicy"),
    Route("POST", "/acl/policy/{policyName}", "PostACLPolicy", WRITE, request="ACLPolicy"),
    Route("GET", "/acl/token", "GetACLTokenSelf", READ, response="ACLToken"),
    Route("DELETE", "/acl/token/{tokenAccessor}", "DeleteACLToken", WRITE),
    Route("GET", "/acl/token/{tokenAccessor}", "GetACLToken", READ, response="ACLToken"),
    Route(
        "POST",
        "/acl/token/{tokenAccessor}",
        "PostACLToken",
        WRITE,
        request="ACLToken",
        response="ACLToken",
    ),
    Route("POST", "/acl/token/onetime", "PostACLTokenOnetime", WRITE, response="OneTimeToken"),
    Route(
        "POST",
        "/acl/token/onetime/exchange",
        "PostACLTokenOnetimeExchange",
        WRITE,
        request="OneTimeTokenExchangeRequest",
        response="ACLToken",
    ),
    Route("GET", "/acl/tokens", "GetACLTokens", READ, response="[]ACLTokenListStub"),
    Route("GET", "/allocation/{allocID}", "GetAllocation", READ, response="Allocation"),
    Route(
        "GET",
        "/allocation/{allocID}/services",
        "GetAllocationServices",
        READ,
        response="[]ServiceRegistration",
    ),
    Route(
        "POST",
        "/allocation/{allocID}/stop",
        "PostAllocationStop",
        {**READ, "no_shutdown_delay": "boolean"},
        response="AllocStopResponse",
    ),
    Route(
        "GET",
        "/allocations",
        "GetAllocations",
        {**READ, "resources": "boolean", "task_states": "boolean"},
        response="[]AllocationListStub",
    ),
    Route("GET", "/deployment/{deploymentID}", "GetDeployment", READ, response="Deployment"),
    Route(
        "POST",
        "/deployment/allocation-health/{deploymentID}",
        "PostDeploymentAllocationHealth",
        WRITE,
        request="DeploymentAllocHealthRequest",
        response="DeploymentUpdateResponse",
    ),
    Route(
        "GET",
        "/deployment/allocations/{deploymentID}",
        "GetDeploymentAllocations",
        READ,
        response="[]AllocationListStub",
    ),
    Route(
        "POST",
        "/deployment/fail/{deploymentID}",
        "PostDeploymentFail",
        WRITE,
        response="DeploymentUpdateResponse",
    ),
    Route(
        "POST",
        "/deployment/pause/{deploymentID}",
        "PostDeploymentPause",
        WRITE,
        request="DeploymentPauseRequest",
        response="DeploymentUpdateResponse",
    ),
    Route(
        "POST",
        "/deployment/promote/{deploymentID}",
        "PostDeploymentPromote",
        WRITE,
        request="DeploymentPromoteRequest",
        response="DeploymentUpdateResponse",
    ),
    Route(
        "POST",
        "/deployment/unblock/{deploymentID}",
        "PostDeploymentUnblock",
        WRITE,
        request="DeploymentUnblockRequest",
        response="DeploymentUpdateResponse",
    ),
    Route("GET", "/deployments", "GetDeployments", READ, response="[]Deployment"),
    Route("GET", "/evaluation/{evalID}", "GetEvaluation", READ, response="Evaluation"),
    Route(
        "GET",
        "/evaluation/{evalID}/allocations",
        "GetEvaluationAllocations",
        READ,
        response="[]AllocationListStub",
    ),
    Route("GET", "/evaluations", "GetEvaluations", READ, response="[]Evaluation"),
    Route(
        "DELETE",
        "/job/{jobName}",
        "DeleteJob",
        {**WRITE, "purge": "boolean", "global": "boolean"},
        response="JobDeregisterResponse",
    ),
    Route("GET", "/job/{jobName}", "GetJob", READ, response="Job"),
    Route(
        "POST",
        "/job/{jobName}",
        "PostJob",
        WRITE,
        request="JobRegisterRequest",
        response="JobRegisterResponse",
    ),
    Route(
        "GET",
        "/job/{jobName}/allocations",
        "GetJobAllocations",
        {**READ, "all": "boolean"},
        response="[]AllocationListStub",
    ),
    Route("GET", "/job/{jobName}/deployment", "GetJobDeployment", READ, response="Deployment"),
    Route(
        "GET",
        "/job/{jobName}/deployments",
        "GetJobDeployments",
        {**READ, "all": "integer"},
        response="[]Deployment",
    ),
    Route(
        "POST",
        "/job/{jobName}/dispatch",
        "PostJobDispatch",
        WRITE,
        request="JobDispatchRequest",
        response="JobDispatchResponse",
    ),
    Route(
        "POST",
        "/job/{jobName}/evaluate",
        "PostJobEvaluate",
        WRITE,
        request="JobEvaluateRequest",
        response="JobRegisterResponse",
    ),
    Route("GET", "/job/{jobName}/evaluations", "GetJobEvaluations", READ, response="[]Evaluation"),
    Route(
        "POST",
        "/job/{jobName}/periodic/force",
        "PostJobPeriodicForce",
        WRITE,
        response="PeriodicForceResponse",
    ),
    Route(
        "POST",
        "/job/{jobName}/plan",
        "PostJobPlan",
        WRITE,
        request="JobPlanRequest",
        response="JobPlanResponse",
    ),
    Route(
        "POST",
        "/job/{jobName}/revert",
        "PostJobRevert",
        WRITE,
        request="JobRevertRequest",
        response="JobRegisterResponse",
    ),
    Route(
        "GET", "/job/{jobName}/scale", "GetJobScaleStatus", READ, response="JobScaleStatusResponse"
    ),
    Route(
        "POST",
        "/job/{jobName}/scale",
        "PostJobScalingRequest",
        WRITE,
        request="ScalingRequest",
        response="JobRegisterResponse",
    ),
    Route(
        "POST",
        "/job/{jobName}/stable",
        "PostJobStability",
        WRITE,
        request="JobStabilityRequest",
        response="JobStabilityResponse",
    ),
    Route("GET", "/job/{jobName}/summary", "GetJobSummary", READ, response="JobSummary"),
    Route(
        "GET",
        "/job/{jobName}/versions",
        "GetJobVersions",
        {**READ, "diffs": "boolean"},
        response="JobVersionsResponse",
    ),
    Route("GET", "/jobs", "GetJobs", READ, response="[]JobListStub"),
    Route(
        "POST",
        "/jobs",
        "RegisterJob",
        WRITE,
        request="JobRegisterRequest",
        response="JobRegisterResponse",
    ),
    Route("POST", "/jobs/parse", "PostJobParse", request="JobsParseRequest", response="Job"),
    Route("GET", "/metrics", "GetMetricsSummary", {"format": "string"}, response="MetricsSummary"),
    Route("POST", "/namespace", "CreateNamespace", WRITE),
    Route("DELETE", "/namespace/{namespaceName}", "DeleteNamespace", WRITE),
    Route("GET", "/namespace/{namespaceName}", "GetNamespace", READ, response="Namespace"),
    Route("POST", "/namespace/{namespaceName}", "PostNamespace", WRITE, request="Namespace"),
    Route("GET", "/namespaces", "GetNamespaces", READ, response="[]Namespace"),
    Route("GET", "/node/{nodeId}", "GetNode", READ, response="Node"),
    Route(
        "GET",
        "/node/{nodeId}/allocations",
        "GetNodeAllocations",
        READ,
        response="[]AllocationListStub",
    ),
    Route(
        "POST",
        "/node/{nodeId}/drain",
        "UpdateNodeDrain",
        READ,
        request="NodeUpdateDrainRequest",
        response="NodeDrainUpdateResponse",
    ),
    Route(
        "POST",
        "/node/{nodeId}/eligibility",
        "UpdateNodeEligibility",
        READ,
        request="NodeUpdateEligibilityRequest",
        response="NodeEligibilityUpdateResponse",
    ),
    Route("POST", "/node/{nodeId}/purge", "UpdateNodePurge", READ, response="NodePurgeResponse"),
    Route("GET", "/nodes", "GetNodes", {**READ, "resources": "boolean"}, response="[]NodeListStub"),
    Route(
        "GET",
        "/operator/autopilot/configuration",
        "GetOperatorAutopilotConfiguration",
        READ,
        response="AutopilotConfiguration",
    ),
    Route(
        "PUT",
        "/operator/autopilot/configuration",
        "PutOperatorAutopilotConfiguration",
        WRITE,
        request="AutopilotConfiguration",
        response="boolean",
    ),
    Route(
        "GET",
        "/operator/autopilot/health",
        "GetOperatorAutopilotHealth",
        READ,
        response="OperatorHealthReply",
    ),
    Route(
        "GET",
        "/operator/raft/configuration",
        "GetOperatorRaftConfiguration",
        READ,
        response="RaftConfiguration",
    ),
    Route("DELETE", "/operator/raft/peer", "DeleteOperatorRaftPeer", WRITE),
    Route(
        "GET",
        "/operator/scheduler/configuration",
        "GetOperatorSchedulerConfiguration",
        READ,
        response="SchedulerConfigurationResponse",
    ),
    Route(
        "POST",
        "/operator/scheduler/configuration",
        "PostOperatorSchedulerConfiguration",
        WRITE,
        request="SchedulerConfiguration",
        response="SchedulerSetConfigurationResponse",
    ),
    Route("GET", "/plugin/csi/{pluginID}", "GetPluginCSI", READ, response="[]CSIPlugin"),
    Route("GET", "/plugins", "GetPlugins", READ, response="[]CSIPluginListStub"),
    Route("POST", "/quota", "CreateQuotaSpec", WRITE, request="QuotaSpec"),
    Route("DELETE", "/quota/{specName}", "DeleteQuotaSpec", WRITE),
    Route("GET", "/quota/{specName}", "GetQuotaSpec", READ, response="QuotaSpec"),
    Route("POST", "/quota/{specName}", "PostQuotaSpec", WRITE, request="QuotaSpec"),
    Route("GET", "/quotas", "GetQuotas", READ, response="[]object"),
    Route("GET", "/regions", "GetRegions", response="[]string"),
    Route(
        "GET", "/scaling/policies", "GetScalingPolicies", READ, response="[]ScalingPolicyListStub"
    ),
    Route("GET", "/scaling/policy/{policyID}", "GetScalingPolicy", READ, response="ScalingPolicy"),
    Route("POST", "/search", "GetSearch", READ, request="SearchRequest", response="SearchResponse"),
    Route(
        "POST",
        "/search/fuzzy",
        "GetFuzzySearch",
        READ,
        request="FuzzySearchRequest",
        response="FuzzySearchResponse",
    ),
    Route("GET", "/status/leader", "GetStatusLeader", READ, response="string"),
    Route("GET", "/status/peers", "GetStatusPeers", READ, response="[]string"),
    Route("PUT", "/system/gc", "PutSystemGC", WRITE),
    Route("PUT", "/system/reconcile/summaries", "PutSystemReconcileSummaries", WRITE),
    Route(
        "POST",
        "/validate/job",
        "PostJobValidateRequest",
        WRITE,
        request="JobValidateRequest",
        response="JobValidateResponse",
    ),
    Route("DELETE", "/var/{path}", "DeleteVariable", {**WRITE, "cas": "integer"}),
    Route("GET", "/var/{path}", "GetVariableQuery", READ, response="Variable"),
    Route(
        "POST",
        "/var/{path}",
        "PostVariable",
        {**WRITE, "cas": "integer"},
        request="Variable",
        response="Variable",
    ),
    Route(
        "PUT",
        "/var/{path}",
        "PutVariable",
        {**WRITE, "cas": "integer"},
        request="Variable",
        response="Variable",
    ),
    Route("GET", "/vars", "GetVariablesListRequest", READ, response="[]VariableMetadata"),
    Route(
        "DELETE", "/volume/csi/{volumeId}", "DeleteVolumeRegistration", {**WRITE, "force": "string"}
    ),
    Route("GET", "/volume/csi/{volumeId}", "GetVolume", READ, response="CSIVolume"),
    Route(
        "POST",
        "/volume/csi/{volumeId}",
        "PostVolumeRegistration",
        WRITE,
        request="CSIVolumeRegisterRequest",
    ),
    Route(
        "DELETE",
        "/volume/csi/{volumeId}/{action}",
        "DetachOrDeleteVolume",
        {**WRITE, "node": "string"},
    ),
    Route(
        "POST",
        "/volume/csi/{volumeId}/{action}",
        "CreateVolume",
        WRITE,
        request="CSIVolumeCreateRequest",
    ),
    Route(
        "GET",
        "/volumes",
        "GetVolumes",
        {**READ, "node_id": "string", "plugin_id": "string", "type": "string"},
        response="[]CSIVolumeListStub",
    ),
    Route("POST", "/volumes", "PostVolume", WRITE, request="CSIVolumeRegisterRequest"),
    Route(
        "GET",
        "/volumes/external",
        "GetExternalVolumes",
        {**READ, "plugin_id": "string"},
        response="CSIVolumeListExternalResponse",
    ),
    Route(
        "DELETE",
        "/volumes/snapshot",
        "DeleteSnapshot",
        {**WRITE, "plugin_id": "string", "snapshot_id": "string"},
    ),
    Route(
        "GET",
        "/volumes/snapshot",
        "GetSnapshots",
        {**READ, "plugin_id": "string"},
        response="CSISnapshotListResponse",
    ),
    Route(
        "POST",
        "/volumes/snapshot",
        "PostSnapshot",
        WRITE,
        request="CSISnapshotCreateRequest",
        response="CSISnapshotCreateResponse",
    ),
)

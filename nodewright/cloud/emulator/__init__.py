"""cloud.emulator: a local HTTPS emulator of the Azure Resource Manager REST API.

The real Azure SDK clients (azure-mgmt-compute, -network, -msi) talk to it over TLS on loopback.

Start one (tests get it from the ``arm_emulator`` fixture, fresh per test)::

    from nodewright.cloud.emulator import ArmEmulator

    with ArmEmulator() as emulator:                  # port 0: a free port; CA written to a temp dir
        group = "rg-nodes"
        emulator.estate.add_resource_group(group)
        vnet = emulator.estate.add_virtual_network(group, "vnet", subnets={"nodes": "10.240.0.0/24"})
        identity_id = emulator.estate.add_identity(group, "id-web")
        subnet_id = vnet + "/subnets/nodes"
        vmss_id = emulator.estate.add_scale_set(group, "vmss-a", subnet_id=subnet_id, capacity=2)
        client = ComputeManagementClient(credential, DEFAULT_SUBSCRIPTION, **emulator.client_options())

``client_options()`` gives ``base_url`` (``emulator.endpoint``, ``https://127.0.0.1:PORT``),
``credential_scopes`` (``[endpoint + "/.default"]``), ``connection_verify`` (``emulator.ca_file``)
and ``polling_interval=0``. Any credential whose ``get_token`` returns some token works: the
emulator wants ``Authorization: Bearer <anything>`` and answers 401 without it. Every request
needs an ``api-version`` query parameter (any value).

Faults (``emulator.faults``; operation names are the SDK's, e.g. ``"VirtualMachineScaleSets.update"``,
``"NetworkInterfaces.create_or_update"``, ``"VirtualMachineScaleSetVMs.list"``; or match with
``method=`` and a shell-style ``path=`` pattern such as ``"*/virtualMachineScaleSets/*"``)::

    emulator.faults.throttle("VirtualMachineScaleSets.update", times=2, retry_after=1)   # 429 + Retry-After
    emulator.faults.server_error("NetworkInterfaces.get", times=1, status=503)
    emulator.faults.fail_operation("VirtualMachines.update", code="InternalExecutionError")  # LRO ends Failed
    emulator.faults.add_latency(0.2)                                   # every call; or per operation
    emulator.faults.slow_operations(5.0, "VirtualMachineScaleSets.update")  # LRO InProgress for 5 s
    emulator.state.operation_duration = 1.0                            # default LRO duration (0)
    emulator.state.operation_retry_after = None                        # no Retry-After (default 10 s)

The request log (``emulator.requests``): ``entries(operation, method=, path_contains=, since=)``,
``count(...)``, ``counts_by_operation()``; each entry has ``method``, ``path``, ``operation``,
``status``, ``monotonic`` (``time.monotonic()`` at arrival) and ``timestamp``.

State helpers: ``emulator.state.render(arm_id)`` (current JSON of any resource),
``state.set_power_state(machine_id, "stopped")``, ``state.set_provisioning_state(id, "Failed")``,
``state.deny_linked_access(scope)`` (writes linking an identity or gallery image under ``scope``
answer 403 LinkedAuthorizationFailed), ``estate.snapshot()``.

Images: the state holds an image catalog (:mod:`~nodewright.cloud.emulator.images`) seeded with a
few common marketplace images; ``estate.add_marketplace_image(MarketplaceImage(...))`` and
``estate.add_gallery_image(definition_id, versions)`` (or the seed file's ``images``) add more. A
write naming an unpublished marketplace image or version answers 404 PlatformImageNotFound, and a
missing version of a catalogued gallery 404 GalleryImageNotFound; images of galleries the catalog
does not know are accepted. Machines inherit OS type, Windows or Linux settings, Trusted Launch
(Generation 2) or Standard security, OS disk size and ``exactVersion`` from their image. Instance
views are derived from state; ``estate.add_extension(machine_id, name, properties)`` gives a VM
an extension, and ``estate.add_dedicated_host_group(group, name, hosts)`` a host group whose
machines are placed on its hosts in turn.

Admin HTTP endpoints (no auth): ``GET|POST|DELETE /_emulator/faults`` (POST JSON such as
``{"kind": "throttle", "operation": "VirtualMachineScaleSets.update", "times": 2, "retry_after": 1}``;
kinds ``throttle``, ``compute_throttle``, ``server_error``, ``operation_failure``, ``latency``,
``operation_duration``),
``GET|DELETE /_emulator/requests``, ``GET /_emulator/state``, ``POST /_emulator/seed`` (a seed
document), ``POST /_emulator/reset``, ``POST /_emulator/throttling`` (request limits, see
:func:`~nodewright.cloud.emulator.throttling.limits_from_json`), ``POST
/_emulator/operation-duration`` ``{"seconds": s, "retryAfter": r}``.

Peers written in Go (go-autorest) also need the instance metadata service and Entra's v1 token
route: ``imds.MetadataProxy(imds.InstanceMetadata(resource_group=...))`` answers
``http://169.254.169.254/metadata/instance/compute/...`` for a process given ``HTTP_PROXY``
(see :mod:`~nodewright.cloud.emulator.imds`), and ``POST /{tenant}/oauth2/token`` grants a
client-secret token (:mod:`~nodewright.cloud.emulator.entra`).

CLI: ``python -m nodewright.cloud.emulator --seed config/emulator/seed-sample.yaml --port 0
--state-dir DIR`` prints the endpoint and CA path (also written to ``DIR/endpoint.json``).
Seed file format: see :mod:`nodewright.cloud.emulator.seed`.
"""

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.faults import Fault, FaultInjector, FaultKind
from nodewright.cloud.emulator.request_log import RecordedRequest, RequestLog
from nodewright.cloud.emulator.seed import EstateBuilder, load_seed_file
from nodewright.cloud.emulator.server import ArmEmulator
from nodewright.cloud.emulator.state import DEFAULT_LOCATION, DEFAULT_SUBSCRIPTION, EmulatorState

__all__ = [
    "DEFAULT_LOCATION",
    "DEFAULT_SUBSCRIPTION",
    "ArmEmulator",
    "ArmError",
    "EmulatorState",
    "ErrorCode",
    "EstateBuilder",
    "Fault",
    "FaultInjector",
    "FaultKind",
    "RecordedRequest",
    "RequestLog",
    "load_seed_file",
]

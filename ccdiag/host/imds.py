"""A cloud's instance metadata service, asked for one thing: the instance type.

Why: DMI carries the instance type on AWS only (``product_name`` "p5.48xlarge"); Azure, Google and
Oracle keep it in their instance metadata service (IMDS), an HTTP endpoint on the link-local address
169.254.169.254 that answers only from inside the VM and never leaves the host. The host door asks it
(:meth:`ccdiag.host.door.LiveHost.cloud_metadata`) only when DMI already says the node is on that cloud, so
a bare-metal node or a laptop never sends a packet, and a snapshot records the answer for replay.

Bounded for a Slurm prolog: the address is the fixed IP (no DNS lookup of
``metadata.google.internal``), the connection gets :data:`CONNECT_S`, the whole exchange
:data:`TOTAL_S`, the answer at most :data:`MAX_BYTES`; no proxy is used (``http.client`` reads no
``http_proxy``), as each vendor asks. A service that does not answer costs at most :data:`TOTAL_S`
once per process (:data:`_CACHE`), so the exporter does not pay it at every scrape.

Endpoints, headers and fields (the vendors' documentation):

* Azure: ``GET /metadata/instance/compute/vmSize?api-version=2021-02-01&format=text`` with header
  ``Metadata: true``; the answer is the VM size, e.g. ``Standard_ND96isr_H100_v5``
  (https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service: "a well-known,
  non-routable IP address (169.254.169.254)", "bypass web proxies", ``compute/vmSize``).
* Google Compute Engine: ``GET /computeMetadata/v1/instance/machine-type`` with header
  ``Metadata-Flavor: Google``; the answer is ``projects/PROJECT_NUM/machineTypes/MACHINE_TYPE``
  (https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys;
  https://cloud.google.com/compute/docs/metadata/querying-metadata; metadata.google.internal is
  169.254.169.254).
* Oracle Cloud: ``GET /opc/v2/instance/shape`` with header ``Authorization: Bearer Oracle`` (IMDSv2;
  v1 may be disabled); the answer is the shape, e.g. ``BM.GPU.H100.8``
  (https://docs.oracle.com/iaas/Content/Compute/Tasks/gettingmetadata.htm: "HTTP endpoint listening on
  169.254.169.254", "All requests to the v2 endpoints must include an authorization header").
"""

from __future__ import annotations

import http.client
import threading
import time

ADDRESS = "169.254.169.254"
PORT = 80
#: provider -> (path, headers) of its instance-type read
ENDPOINTS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "azure": ("/metadata/instance/compute/vmSize?api-version=2021-02-01&format=text", (("Metadata", "true"),)),
    "gcp": ("/computeMetadata/v1/instance/machine-type", (("Metadata-Flavor", "Google"),)),
    "oci": ("/opc/v2/instance/shape", (("Authorization", "Bearer Oracle"),)),
}
#: seconds to connect (a link-local service answers in milliseconds; nothing there fails at once or here)
CONNECT_S = 0.3
#: seconds for the whole exchange
TOTAL_S = 1.0
MAX_BYTES = 4096

_CACHE: dict[str, tuple[str | None, tuple[str, str] | None]] = {}
_LOCK = threading.Lock()


class ImdsError(Exception):
    """The service did not give the instance type: ``kind`` as the door's read errors
    (``missing``, ``invalid``, ``io``), ``message`` why."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        self.message = message
        super().__init__(message)


def url_of(provider: str) -> str:
    return f"http://{ADDRESS}:{PORT}{ENDPOINTS[provider][0]}"


def fetch(provider: str) -> str:
    """The text the provider's service answers for the instance type (raises :class:`ImdsError`);
    asked once per process, the answer or the failure kept."""
    if provider not in ENDPOINTS:
        raise ImdsError("invalid", f"no instance metadata endpoint known for provider {provider!r}")
    with _LOCK:
        if provider not in _CACHE:
            try:
                _CACHE[provider] = (_get(provider), None)
            except ImdsError as exc:
                _CACHE[provider] = (None, (exc.kind, exc.message))
        text, err = _CACHE[provider]
    if err is not None:
        raise ImdsError(*err)
    assert text is not None
    return text


def _get(provider: str) -> str:
    path, headers = ENDPOINTS[provider]
    end = time.monotonic() + TOTAL_S
    conn = http.client.HTTPConnection(ADDRESS, PORT, timeout=CONNECT_S)
    try:
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(max(0.05, end - time.monotonic()))
        conn.request("GET", path, headers=dict(headers))
        resp = conn.getresponse()
        body = resp.read(MAX_BYTES + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise ImdsError("io", f"no answer from the {provider} instance metadata service at {ADDRESS} within "
                              f"{TOTAL_S:g}s: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise ImdsError("missing" if resp.status == 404 else "io",
                        f"the {provider} instance metadata service answered HTTP {resp.status}")
    if len(body) > MAX_BYTES:
        raise ImdsError("invalid", f"the {provider} instance metadata service answered more than {MAX_BYTES} bytes")
    return body.decode("utf-8", "replace")


__all__ = ["ADDRESS", "CONNECT_S", "ENDPOINTS", "ImdsError", "TOTAL_S", "fetch", "url_of"]

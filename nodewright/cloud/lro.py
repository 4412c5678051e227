"""A long-running PATCH followed to its end without the final GET of the resource.

Owns ``AnswerKeepingPolling``. ARM answers a compute PATCH at once with the resource as the
request left it (the new model, ``provisioningState: Updating``, its new etag) and an
``Azure-AsyncOperation`` URL. azure-core's ``ARMPolling`` polls that URL to ``Succeeded``, then
GETs the resource once more for the result. For an identity PATCH that GET tells us nothing new:
the model is the one of the first answer, and so is the etag, on the assumption (the emulator's
behaviour) that a provisioning state reaching Succeeded is not a write. This polling method keeps
the first answer as the result and saves one round trip per PATCH. Were the assumption wrong, the
next PATCH planned from that etag would cost a 412 and a fresh read, never a wrong write. A failed
or cancelled operation still raises as with ``ARMPolling``, and an operation that ARM tracks only
through ``Location`` or the resource body falls back to ``ARMPolling``'s own algorithms.
"""

from __future__ import annotations

from typing import Any

from azure.core.pipeline import PipelineResponse
from azure.core.polling.base_polling import LocationPolling, StatusCheckPolling
from azure.mgmt.core.polling.arm_polling import ARMPolling, AzureAsyncOperationPolling, BodyContentPolling

__all__ = ["AnswerKeepingPolling"]


class _AsyncOperationWithoutFinalGet(AzureAsyncOperationPolling[Any, Any]):
    """Poll ``Azure-AsyncOperation`` to the end; ask for no final GET."""

    def get_final_get_url(self, pipeline_response: PipelineResponse[Any, Any]) -> str | None:
        del pipeline_response
        return None


class AnswerKeepingPolling(ARMPolling):
    """``ARMPolling`` whose result, for an operation tracked by ``Azure-AsyncOperation``, is the
    first answer's resource (see the module docstring); ``interval`` is the poll delay when ARM
    sends no Retry-After."""

    def __init__(self, interval: float) -> None:
        super().__init__(
            interval,
            lro_algorithms=[
                _AsyncOperationWithoutFinalGet(),
                LocationPolling(),
                BodyContentPolling(),
                StatusCheckPolling(),
            ],
        )

    def resource(self) -> Any:
        if isinstance(self._operation, _AsyncOperationWithoutFinalGet):
            return self._parse_resource(self._initial_response)
        return super().resource()

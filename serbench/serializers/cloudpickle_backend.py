"""``cloudpickle``: like ``pickle`` but through cloudpickle's pickler (in-band)."""

from __future__ import annotations

import cloudpickle

from serbench.serializers.pickle_backend import PickleSerializer


class CloudPickleSerializer(PickleSerializer):
    """cloudpickle in-band, one frame; unpickled by stdlib pickle."""

    name = "cloudpickle"
    description = "cloudpickle, in-band, one frame"
    dumps = staticmethod(cloudpickle.dumps)

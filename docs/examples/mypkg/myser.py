# mypkg/myser.py
import pickle

from serbench.serializers import get_serializer


class MySerializer:
    name = "mine"
    # What torch's own pickler cannot carry (float8, uint16+, ...), as the built-in pickle declares it.
    unsupported = get_serializer("pickle").unsupported

    def encode(self, obj):
        return [pickle.dumps(obj, protocol=5)]

    def decode(self, frames, type_):
        return pickle.loads(frames[0])


def factory(**options):  # spec options arrive as keyword strings
    return MySerializer()

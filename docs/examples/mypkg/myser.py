# mypkg/myser.py
import pickle


class MySerializer:
    name = "mine"

    def encode(self, obj):
        return [pickle.dumps(obj, protocol=5)]

    def decode(self, frames, type_):
        return pickle.loads(frames[0])


def factory(**options):  # spec options arrive as keyword strings
    return MySerializer()

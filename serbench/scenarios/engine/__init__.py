"""The engine of the ipc scenario and the frontend's link to it (docs/architecture.md, "Engine").

``protocol`` is what both ends share (the header frame, the request
checksum, the errors a frontend raises); ``server`` is the engine process;
``client`` is the frontend's end. The client imports the protocol, not the
server, except to fork a local engine.
"""

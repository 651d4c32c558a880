"""The HTTP front end: one aiohttp listener on the queue manager's loop.

A front end beside ``stomp/``, ``admin/``, ``api.py`` and ``channels/``: it
imports the core and what lies below the front ends, never its siblings;
``server/`` starts it and hands it what it needs of them as Protocols
(``context.py``). Its modules, by job:

* ``server.py``: the listener (``WebServer``), its TLS, its limits on
  requests, and the one list of features that add their routes;
* ``context.py``: ``WebContext``, what every feature is given;
* ``errors.py``: MQ's REST error bodies and their status codes;
* ``auth.py``: who a request is (HTTP basic with harbormq's users, or the
  OS user of an anonymous loopback request) and MQ's CSRF header rule;
* ``mqsc_api.py``: MQ's administrative REST API (``runCommand``,
  ``runCommandJSON``); ``messaging.py``: its messaging REST API;
* ``openapi.py``: the OpenAPI description of what the listener serves;
* ``starting.py``: the start's status while restart recovery runs, and the
  gate that serves only it until the queue manager runs.

Not here: the STOMP frames behind ``/ws`` (``stomp/websocket.py``), the MQSC
commands (``admin/``), who may do what (``security/``). See docs/http.md.
"""

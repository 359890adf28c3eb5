# The REPL worker: one persistent python3 per session, started inside the kernel's sandbox.
# It speaks JSON Lines with the kernel over private copies of stdin/stdout; fds 0 and 1 are then
# pointed away so code that reads stdin or writes to fd 1 can't desynchronise the protocol.
# Isolation is the OS sandbox's job (Landlock, seccomp, rlimits), not a filter on builtins.
import ast, io, json, json.encoder, json.scanner, os, re, resource, sys, time, traceback

_proto_in = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
_proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
_devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(_devnull, 0)
os.dup2(2, 1)  # raw writes to fd 1 go to the stderr pipe, which the kernel logs

# At exec Linux folds the spawning process's peak RSS into ours, so ru_maxrss only measures this
# worker once it climbs above that starting floor.
_RSS_FLOOR_KB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
OUTPUT_CAP = int(os.environ.get("KERNEX_REPL_OUTPUT_CAP", "1048576"))
CPU_SECONDS = int(os.environ.get("KERNEX_REPL_CPU_SECONDS", "0"))


# The C encoder and scanner behind json.dumps/json.loads, made once: the Python wrappers around them
# cost more per message (~3 µs) than the encoding itself. No circular-reference markers (a shared dict
# would keep stale entries after a failed encode): a cycle, which only user code can pass (llm_query's
# model), ends in RecursionError instead.
_encode = json.encoder.c_make_encoder(None, repr, json.encoder.c_encode_basestring, None, ":", ",", False, False, True) \
    if json.encoder.c_make_encoder is not None else None
_scan = json.scanner.c_make_scanner(json.JSONDecoder()) if json.scanner.c_make_scanner is not None else None


def _line(obj):
    text = "".join(_encode(obj, 0)) if _encode is not None else \
        json.dumps(obj, ensure_ascii=False, default=repr, separators=(",", ":"))
    return text.encode("utf-8", "replace") + b"\n"


def _send(obj):
    _proto_out.write(_line(obj))


_quote = json.encoder.c_encode_basestring or json.encoder.py_encode_basestring


def _receive():
    return _decoded(_proto_in.readline())


def _decoded(line):
    if not line:
        os._exit(0)  # the kernel went away
    if _scan is not None:
        text = line.decode("utf-8")
        try:
            obj, end = _scan(text, 0)
            if type(obj) is dict and text[end:].isspace():
                return obj
        except StopIteration:
            pass
    return json.loads(line)  # the slow path, with json's own error for a bad line


class BudgetExceeded(RuntimeError):
    """Raised by llm_query / rlm_query when the run tree's budget is used up."""


class LLMQueryError(RuntimeError):
    """Raised when a sub-query fails for another reason (provider error, bad arguments)."""


_pending = []  # deferred mode: queries nobody could answer yet
_next_query = [0]


def _new_query_id():
    _next_query[0] += 1
    return "q%d" % _next_query[0]


# One exchange with the kernel at a time: code calling tools or sub-queries from several threads
# would otherwise interleave its lines (and a large result's text, written into one buffer).
_exchange_lock = __import__("_thread").allocate_lock()


def _call(kind, **fields):
    with _exchange_lock:
        _send(dict(call=kind, **fields))
        reply = _receive()
    if reply.get("ok"):
        return reply.get("value")
    if reply.get("deferred"):
        return None
    message = reply.get("error", "sub-query failed")
    raise (BudgetExceeded if reply.get("budget") else LLMQueryError)(message)


def _defer(kind, prompt, extra=None):
    qid = _new_query_id()
    entry = {"id": qid, "kind": kind, "prompt": prompt}
    entry.update(extra or {})
    _pending.append(entry)
    return "<<pending:%s>>" % qid


def llm_query(prompt, model=None):
    """One completion by the run's model (or `model`), tools off. Returns the text."""
    if not isinstance(prompt, str):
        raise TypeError("llm_query: prompt must be a str")
    value = _call("llm_query", prompt=prompt, model=model)
    return _defer("llm_query", prompt, {"model": model}) if value is None else value


def llm_query_batched(prompts, model=None):
    """Several completions at once, answered concurrently; results in the order of `prompts`."""
    prompts = list(prompts)
    if not all(isinstance(p, str) for p in prompts):
        raise TypeError("llm_query_batched: prompts must be strs")
    values = _call("llm_query_batched", prompts=prompts, model=model)
    if values is None:
        return [_defer("llm_query", p, {"model": model}) for p in prompts]
    out = []
    for v in values:
        if isinstance(v, dict):
            raise (BudgetExceeded if v.get("budget") else LLMQueryError)(v.get("error", "sub-query failed"))
        out.append(v)
    return out


def rlm_query(prompt, context=None):
    """A recursive sub-agent one level deeper, with its own REPL; `context` becomes its `context`."""
    if not isinstance(prompt, str) or (context is not None and not isinstance(context, str)):
        raise TypeError("rlm_query: prompt and context must be strs")
    value = _call("rlm_query", prompt=prompt, context=context)
    return _defer("rlm_query", prompt, {"context_size": len(context or "")}) if value is None else value


class ToolError(RuntimeError):
    """Raised when a tool called from code fails or is refused (denied, blocked, unknown); the
    message is the tool's own, and `tool` names the tool."""

    def __init__(self, tool, message):
        RuntimeError.__init__(self, message)
        self.tool = tool


# A buffer in this worker's memory that the kernel writes large tool results into (one copy where
# the pipe takes two): made after the first such result came through the pipe, named to the kernel
# with each tool call, and reused (its pages stay in place). [mmap, memoryview, address, size].
_direct = [None, None, 0, 0]
_DIRECT_MIN = 256 * 1024  # the kernel's threshold too (repl_session.cpp)
_DIRECT_MAX = 16 << 20  # larger results take the pipe (a buffer this size stays with the worker)


def _grow_direct(size):
    if size > _DIRECT_MAX or _direct[3] < 0:
        return
    try:
        import ctypes, mmap
        room = min(max(size, 4 << 20) + (1 << 20) - 1 & ~((1 << 20) - 1), _DIRECT_MAX)
        buffer = mmap.mmap(-1, room)
        address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    except Exception:  # no ctypes or mmap here: the pipe it is
        _direct[:] = [None, None, 0, -1]
        return
    if _direct[1] is not None:
        _direct[1].release()
        _direct[0].close()
    _direct[:] = [buffer, memoryview(buffer), address, room]


def _call_tool(name, arguments):
    with _exchange_lock:
        return _call_tool_now(name, arguments)


# The kernel's usual answer to a tool call, a text result following the line as raw bytes:
# {"ok":true,"raw":N}. Read without the JSON scanner or a dict (see _call_tool_now).
_RAW_ANSWER = b'{"ok":true,"raw":'
_RAW_AT = len(_RAW_ANSWER)


def _tool_call_line(name, arguments):
    # The request formatted in one step where it can be (a dict through the encoder costs twice
    # as much); anything unusual (a name that is no str, no C encoder) takes the general path, so
    # the kernel sees the same line either way.
    if _encode is None or type(name) is not str:
        call = {"call": "tool_call", "name": name, "arguments": arguments}
        if _direct[3] > 0:
            call["direct"] = [_direct[2], _direct[3]]
        return _line(call)
    direct = b',"direct":[%d,%d]}\n' % (_direct[2], _direct[3]) if _direct[3] > 0 else b"}\n"
    return b'{"call":"tool_call","name":%s,"arguments":%s%s' % (
        _quote(name).encode("utf-8", "replace"), "".join(_encode(arguments, 0)).encode("utf-8", "replace"),
        direct)


def _call_tool_now(name, arguments):
    # Every call goes back through the kernel: hooks, permission rules, budget, trajectory.
    _proto_out.write(_tool_call_line(name, arguments))
    line = _proto_in.readline()
    if line.startswith(_RAW_ANSWER) and line.endswith(b"}\n") and line[_RAW_AT:-2].isdigit():
        # The whole text, not the model's view, right after the line.
        size = int(line[_RAW_AT:-2])
        text = _proto_in.read(size).decode("utf-8", "replace")
        if size >= _DIRECT_MIN and size > _direct[3]:
            _grow_direct(size)
        return text
    reply = _decoded(line)
    if reply.get("ok"):
        size = reply.get("raw")
        if size is None:
            return reply.get("value")
        # The result's text, the whole of it, not the model's view: in the buffer the kernel wrote
        # it into, or following the line as raw bytes.
        if reply.get("direct") and 0 <= size <= _direct[3]:
            text = str(_direct[1][:size], "utf-8", "replace")
        else:
            text = _proto_in.read(size).decode("utf-8", "replace")
            if size >= _DIRECT_MIN and size > _direct[3]:
                _grow_direct(size)
        key = reply.get("raw_key")
        if key is None:
            return text
        value = reply.get("value")
        value[key] = text
        return value
    message = reply.get("error", "the tool failed")
    if reply.get("budget"):
        raise BudgetExceeded(message)
    raise ToolError(name, message)


def _tool_doc(spec):
    schema = json.dumps(spec.get("parameters") or {}, indent=2, sort_keys=True)
    return "%s\n\nArguments (JSON Schema):\n%s" % (spec.get("description") or "", schema)


class Tools:
    """The run's tools as functions: tools.call(name, **args), tools.<name>(**args) (a name's
    '-' and '.' read as '_'), tools.list() for names and descriptions, help(tools.<name>) for one
    tool's schema. A result is the tool's whole result, never the model's shortened view (past
    the REPL's tool_result_max_bytes the call raises ToolError instead): its structured form (a
    dict or list: MCP structuredContent; read gives {content, lines, truncated}) when it has one,
    else a dict or list when it answered JSON, else a str. A failure raises ToolError with the
    tool's message. Nothing a tool returns reaches the model unless the code prints or returns
    it."""

    def __init__(self):
        self._specs = None
        self._functions = {}

    def _all(self):
        if self._specs is None:  # asked once per eval_code: the run's tools may change between
            listed = _call("tools_list")
            self._specs = {s["name"]: s for s in (listed or []) if isinstance(s, dict) and "name" in s}
            self._functions = {}
        return self._specs

    def list(self):
        """[{name, description}] of every tool code may call."""
        return [{"name": n, "description": s.get("description", "")} for n, s in self._all().items()]

    def schema(self, name):
        """One tool's JSON Schema for its arguments."""
        return self._spec(name).get("parameters")

    def _spec(self, name):
        specs = self._all()
        if name in specs:
            return specs[name]
        for real in specs:
            if real.replace("-", "_").replace(".", "_") == name:
                return specs[real]
        raise AttributeError("no tool named %r (tools.list() shows them)" % (name,))

    def call(self, name, /, **arguments):
        """Runs the tool `name` with keyword arguments and returns its result."""
        if not isinstance(name, str):
            raise TypeError("tools.call: the tool's name must be a str")
        return _call_tool(name, arguments)

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        self._all()
        # Made once per eval_code: a loop calling tools.<name> must not pay for the docstring
        # (the schema as indented JSON) on every call.
        tool = self._functions.get(attr)
        if tool is not None:
            return tool
        spec = self._spec(attr)
        real = spec["name"]

        def tool(**arguments):
            return _call_tool(real, arguments)

        tool.__name__ = tool.__qualname__ = attr
        tool.__doc__ = _tool_doc(spec)
        self._functions[attr] = tool
        # Found as a plain attribute from now on, without __getattr__, until _forget.
        self.__dict__[attr] = tool
        return tool

    def _forget(self):
        # A new eval_code: the run's tools may have changed, so they are listed again when asked.
        self._specs = None
        for attr in self._functions:
            self.__dict__.pop(attr, None)
        self._functions = {}

    def __dir__(self):
        return sorted(n.replace("-", "_").replace(".", "_") for n in self._all())

    def __repr__(self):
        return "<tools: %s>" % ", ".join(sorted(self._all()))


tools = Tools()


def _tool_call_for_modules(name, /, **arguments):
    return _call_tool(name, arguments)


# What the generated servers/ modules import (the kernel writes them, read-only to this worker).
_kernex_tools = type(sys)("kernex_tools")
_kernex_tools.call = _tool_call_for_modules
sys.modules["kernex_tools"] = _kernex_tools
_servers_root = [None]  # the directory holding servers/, as the kernel said


def op_servers(req):
    # A new tree (the run's tools changed): later imports of servers.* come from it.
    root = req["dir"]
    if not isinstance(root, str):
        raise ValueError("dir must be a str")
    old = _servers_root[0]
    if old is not None and old in sys.path:
        sys.path.remove(old)
    sys.path.insert(0, root)
    for name in [n for n in sys.modules if n.split(".")[0] in ("servers", "skills")]:
        del sys.modules[name]
    import importlib
    importlib.invalidate_caches()
    _servers_root[0] = root
    _namespace["SERVERS_DIR"] = os.path.join(root, "servers")
    return {"dir": root}


# `servers/` relative to the working directory, as in the "code execution with MCP" layout
# (os.listdir('servers'), open('servers/README.md'), pathlib, glob, os.walk). The tree stays in
# the kernel's own directory, read-only to this sandbox and outside the workspace, so the kernel
# writes nothing among the user's files: a relative path whose first part is `servers` is looked
# up there, unless the working directory has a `servers` of its own (the user's files come first).
# Writing there fails as any write to the tree does. Only this worker's Python sees the mapping.
_lstat = os.lstat


def _tree_path(path):
    root = _servers_root[0]
    if root is None or isinstance(path, int):
        return path
    p = os.fspath(path)
    as_bytes = isinstance(p, bytes)
    text = os.fsdecode(p) if as_bytes else p
    if "servers" not in text or text.startswith("/"):
        return path
    norm = os.path.normpath(text)
    if norm != "servers" and not norm.startswith("servers/"):
        return path
    try:
        _lstat("servers")
        return path  # the working directory's own
    except OSError:
        pass
    mapped = os.path.join(root, norm)
    return os.fsencode(mapped) if as_bytes else mapped


_NO_PATH = object()


def _through_tree(real, default=_NO_PATH, name="path"):
    def mapped(path=_NO_PATH, *args, **kwargs):
        if path is _NO_PATH:
            path = kwargs.pop(name) if name in kwargs else default
            if path is _NO_PATH:
                return real(*args, **kwargs)  # the real function's own error
        if kwargs.get("dir_fd") is None:
            path = _tree_path(path)
        return real(path, *args, **kwargs)

    mapped.__name__, mapped.__qualname__, mapped.__doc__ = real.__name__, real.__qualname__, real.__doc__
    return mapped


for _name in ("listdir", "scandir"):
    setattr(os, _name, _through_tree(getattr(os, _name), "."))
# Writes are mapped too, so they fail as the tree is read-only (EROFS), not as "no such file".
for _name in ("stat", "lstat", "open", "access", "readlink", "remove", "unlink", "rmdir", "mkdir",
              "chmod", "truncate", "utime"):
    setattr(os, _name, _through_tree(getattr(os, _name)))
io.open = _through_tree(io.open, name="file")
import builtins as _builtins
_builtins.open = io.open
del _name


_saved_here = {}  # skills this worker saved: untrusted until a person trusts them


class _SavedSkillFinder:
    """Last on sys.meta_path: an import of skills.<name> nothing else found is a saved skill that
    is not trusted yet (or none at all), and the error says which."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) != 2 or parts[0] != "skills":
            return None
        package = sys.modules.get("skills")
        untrusted = dict(getattr(package, "_UNTRUSTED", None) or {})
        untrusted.update(_saved_here)
        folder = untrusted.get(parts[1])
        if folder is None:
            return None
        raise ImportError("the saved skill %r is not trusted: a person must review it and run "
                          "`kernex skills trust %s`; later runs can import it then" % (parts[1], folder),
                          name=fullname)


sys.meta_path.append(_SavedSkillFinder)


def save_skill(name, code, description):
    """Saves `code` (Python source) as the skill `name` (lowercase letters and digits) with a
    one-line `description`, in this tenant's saved skills, which the kernel keeps. It is untrusted:
    once a person runs `kernex skills trust <folder>`, later runs `import skills.<name>`. Saving a
    name again replaces it (and it must be trusted again). Returns {name, folder, trust_command}."""
    if not all(isinstance(v, str) for v in (name, code, description)):
        raise TypeError("save_skill: name, code and description must be strs")
    _send({"call": "save_skill", "name": name, "code": code, "description": description})
    reply = _receive()
    if not reply.get("ok"):
        raise ValueError(reply.get("error", "save_skill failed"))
    value = reply.get("value") or {}
    _saved_here[name] = value.get("folder", "")
    sys.modules.pop("skills." + name, None)
    return value


def search_tools(query, detail="description", limit=20):
    """The tools of servers/ that match `query` (words of their name and description), best
    first. detail='name': module names to import; 'description': [{name, module, description}];
    'schema': the same with `parameters` (JSON Schema)."""
    if detail not in ("name", "description", "schema"):
        raise ValueError("detail must be 'name', 'description' or 'schema'")
    if _servers_root[0] is None:
        raise RuntimeError("this REPL has no servers/ tree (no tools are offered to code)")
    with open(os.path.join(_servers_root[0], "servers", "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    terms = [t for t in re.split(r"\W+", str(query).lower()) if t]
    ranked = []
    for entry in index:
        name = (entry.get("name") or "").lower()
        text = name + " " + (entry.get("description") or "").lower()
        score = sum(3 if t in name else 1 if t in text else 0 for t in terms)
        if score or not terms:
            ranked.append((-score, entry.get("name") or "", entry))
    ranked.sort(key=lambda r: (r[0], r[1]))
    out = []
    for _, _, e in ranked[:limit]:
        if detail == "name":
            out.append(e["module"])
            continue
        item = {"name": e["name"], "module": e["module"], "description": e.get("description", "")}
        if detail == "schema":
            item["parameters"] = e.get("parameters")
        out.append(item)
    return out


def submit_result(value):
    """Records the run's result (any JSON value); the run's answer and trajectory carry it."""
    _call("submit_result", value=value)


def checkpoint(*names):
    """Saves the REPL's variables (all, or those named) with the kernel for this session, so that
    a later worker (after a timeout, a crash, a restart or in a new `kernex` process on the same
    session) gets them back with restore(). Values that can't be pickled are skipped and named.
    Returns {saved, skipped, bytes, persisted} (persisted: kept in the data dir)."""
    import base64, pickle
    chosen = list(names) or sorted(_user_vars())
    saved, skipped = {}, []
    for name in chosen:
        if name not in _namespace:
            raise KeyError("no variable named %r" % (name,))
        try:
            pickle.dumps(_namespace[name], protocol=pickle.HIGHEST_PROTOCOL)
            saved[name] = _namespace[name]
        except Exception:
            skipped.append(name)
    blob = pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL)
    _send({"call": "checkpoint", "data": base64.b64encode(blob).decode("ascii")})
    reply = _receive()
    if not reply.get("ok"):
        raise RuntimeError(reply.get("error", "checkpoint failed"))
    return {"saved": sorted(saved), "skipped": skipped, "bytes": len(blob),
            "persisted": bool((reply.get("value") or {}).get("persisted"))}


def restore():
    """Puts back the variables of this session's last checkpoint(); returns their names."""
    import base64, pickle
    _send({"call": "restore"})
    reply = _receive()
    if not reply.get("ok"):
        raise RuntimeError(reply.get("error", "restore failed"))
    data = base64.b64decode(_proto_in.read(reply.get("raw") or 0), validate=True)
    values = pickle.loads(data)  # this sandboxed worker's own earlier pickle
    if not isinstance(values, dict):
        raise RuntimeError("the checkpoint holds no variables")
    _namespace.update(values)
    return sorted(values)


_namespace = {
    "__name__": "__repl__",
    "llm_query": llm_query,
    "llm_query_batched": llm_query_batched,
    "rlm_query": rlm_query,
    "BudgetExceeded": BudgetExceeded,
    "LLMQueryError": LLMQueryError,
    "ToolError": ToolError,
    "tools": tools,
    "submit_result": submit_result,
    "search_tools": search_tools,
    "checkpoint": checkpoint,
    "restore": restore,
    "save_skill": save_skill,
    "SERVERS_DIR": None,
}
_builtin_names = set(_namespace) | {"__builtins__"}


class _CappedText(io.TextIOBase):
    def __init__(self, cap):
        self.parts, self.size, self.dropped, self.cap = [], 0, 0, cap

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str")
        room = self.cap - self.size
        if room >= len(s):
            self.parts.append(s)
            self.size += len(s)
        else:
            if room > 0:
                self.parts.append(s[:room])
                self.size += room
            self.dropped += len(s) - max(room, 0)
        return len(s)


def _type_of(name, text):
    ext = os.path.splitext(name)[1].lower().lstrip(".")
    if ext in ("json", "jsonl", "csv", "tsv", "md", "log", "xml", "html", "yaml", "yml", "py", "txt"):
        return ext
    head = text[:200].lstrip()
    if head.startswith("{") or head.startswith("["):
        return "json"
    return "text"


class ContextVar(dict):
    """A loaded context: content, lines, line_count, size, type and metadata. `lines` is split on
    first use, so loading 50 MB costs one decode and not a million string objects up front."""

    def _lines(self):
        if not dict.__contains__(self, "lines"):
            dict.__setitem__(self, "lines", _split_lines(dict.__getitem__(self, "content")))
        return self

    def __missing__(self, key):
        if key == "lines":
            return self._lines()["lines"]
        raise KeyError(key)

    def __contains__(self, key):
        return key == "lines" or dict.__contains__(self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def keys(self):
        return dict.keys(self._lines())

    def items(self):
        return dict.items(self._lines())

    def values(self):
        return dict.values(self._lines())

    def __iter__(self):
        return dict.__iter__(self._lines())

    def __len__(self):
        return dict.__len__(self._lines())

    def __repr__(self):
        return "<context %s: %d bytes, %d lines>" % (self["type"], self["size"], self["line_count"])


_namespace["ContextVar"] = ContextVar
_builtin_names.add("ContextVar")


def _split_lines(text):
    # Lines end at "\n" (a "\r\n" pair counts as one end), so line_count is known without splitting.
    lines = text.replace("\r\n", "\n").split("\n") if "\r\n" in text else text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _make_context(data, source):
    text = data.decode("utf-8", "replace")
    line_count = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    ctx = ContextVar(content=text, line_count=line_count, size=len(data), type=_type_of(source or "", text),
                     metadata={"source": source})
    return ctx


def _describe(value):
    if isinstance(value, ContextVar):
        return {"type": "context", "size": value.get("size"), "line_count": value.get("line_count"),
                "content_type": value.get("type"), "metadata": value.get("metadata")}
    out = {"type": type(value).__name__}
    try:
        out["length"] = len(value)
    except Exception:
        pass
    text = repr(value) if not callable(value) else "<%s>" % type(value).__name__
    out["preview"] = text[:120] + ("…" if len(text) > 120 else "")
    return out


def _user_vars():
    return {k: v for k, v in _namespace.items()
            if k not in _builtin_names and not k.startswith("_") and type(v).__name__ != "module"}


def _target(name):
    if not isinstance(name, str) or name not in _namespace:
        raise KeyError("no variable named %r (list_vars shows what exists)" % (name,))
    return _namespace[name]


def op_load(req):
    name = req["name"]
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError("name must be a Python identifier, got %r" % (name,))
    if "nbytes" in req:
        data = _proto_in.read(req["nbytes"])
        source = req.get("source")
    else:
        path = req["file"]
        with open(path, "rb") as f:  # inside the sandbox: only what the policy grants is readable
            data = f.read()
        source = path
    ctx = _make_context(data, source)
    del data
    _namespace[name] = ctx
    return {"name": name, "size": ctx["size"], "line_count": ctx["line_count"], "type": ctx["type"],
            "metadata": ctx["metadata"]}


def op_list(req):
    return {"variables": {k: _describe(v) for k, v in sorted(_user_vars().items())}}


def _cap(text, limit):
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def op_peek(req):
    value = _target(req["name"])
    start, end = req.get("start"), req.get("end")
    if isinstance(value, dict) and "lines" in value:
        chunk = "\n".join(value["lines"][start:end])
        unit = "lines"
    elif isinstance(value, str):
        chunk, unit = value[start:end], "chars"
    elif isinstance(value, (list, tuple)):
        chunk, unit = "\n".join(map(str, value[start:end])), "items"
    else:
        chunk, unit = repr(value)[start:end], "chars"
    chunk, dropped = _cap(chunk, OUTPUT_CAP)
    return {"name": req["name"], "unit": unit, "start": start, "end": end, "text": chunk, "dropped": dropped}


def op_scan(req):
    value = _target(req["name"])
    pattern = re.compile(req["pattern"])
    max_hits = int(req.get("max_hits") or 20)
    if isinstance(value, dict) and "lines" in value:
        lines = value["lines"]
    elif isinstance(value, str):
        lines = value.splitlines()
    elif isinstance(value, (list, tuple)):
        lines = [str(v) for v in value]
    else:
        lines = repr(value).splitlines()
    hits, total = [], 0
    for number, line in enumerate(lines):
        if pattern.search(line):
            total += 1
            if len(hits) < max_hits:
                hits.append({"line": number, "text": line[:1000]})
    return {"name": req["name"], "pattern": req["pattern"], "total": total, "hits": hits}


_compiled = {}  # source -> (statements, trailing expression or None); small programs only


def _compile(code):
    hit = _compiled.get(code)
    if hit is not None:
        return hit
    tree = ast.parse(code, "<repl>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = compile(ast.Expression(tree.body.pop().value), "<repl>", "eval")
    hit = (compile(tree, "<repl>", "exec"), last)
    if len(code) <= 4096:
        if len(_compiled) >= 256:
            _compiled.clear()
        _compiled[code] = hit
    return hit


# RLIMIT_CPU counts the worker's whole life, so it is re-armed before a call once less than one
# call's allowance is left (CPU time used reaches _cpu_rearm_at), to at most two allowances: a call
# gets between cpu_seconds and twice that.
_cpu_rearm_at = [0.0 if CPU_SECONDS > 0 else float("inf")]


def _arm_cpu_limit(used):
    soft = int(used) + 2 * CPU_SECONDS + 1
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY and soft >= hard:
        soft = hard
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    _cpu_rearm_at[0] = soft - CPU_SECONDS


_out, _err = _CappedText(OUTPUT_CAP), _CappedText(OUTPUT_CAP)  # reused: making two costs ~1 µs a call


_getrusage, _SELF = resource.getrusage, resource.RUSAGE_SELF
_usage = [_getrusage(_SELF)]  # the worker's resource usage when it last answered
_EVAL_ANSWER = b'{"ok":true,"value":{"cpu_ms":%.3f,"peak_rss_kb":%s,"stdout":%s,"stderr":%s}}\n'


def op_eval(req):
    # The hot path of the protocol: names bound once, no helper calls on the way.
    if _pending:
        del _pending[:]
    if tools._specs is not None:
        tools._forget()
    out, err = _out, _err
    if out.parts or out.dropped:
        out.parts, out.size, out.dropped = [], 0, 0
    if err.parts or err.dropped:
        err.parts, err.size, err.dropped = [], 0, 0
    # One getrusage a call (a syscall costs ~0.5 µs here): CPU time counts from the previous answer,
    # so it includes reading this request and whatever threads earlier code left running. The
    # CPU limit is re-armed from that figure too, so such threads can shorten this call's allowance;
    # RLIMIT_CPU still caps the worker as a whole.
    before = _usage[0]
    if before.ru_utime + before.ru_stime >= _cpu_rearm_at[0]:
        _arm_cpu_limit(before.ru_utime + before.ru_stime)
    error = None
    saved_out, saved_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = req["code"]
        body, last = _compiled.get(code) or _compile(code)
        exec(body, _namespace)
        if last is not None:
            value = eval(last, _namespace)
            if value is not None:
                print(repr(value))
    except SystemExit as e:
        error = "SystemExit: %s (the REPL keeps running)" % (e.code,)
    except BaseException:
        kind, value, tb = sys.exc_info()
        # Drop the worker's own frames so the model sees its code's traceback only.
        while tb is not None and tb.tb_frame.f_code.co_filename != "<repl>":
            tb = tb.tb_next
        error = "".join(traceback.format_exception(kind, value, tb))
    finally:
        sys.stdout, sys.stderr = saved_out, saved_err
    after = _usage[0] = _getrusage(_SELF)
    cpu_ms = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    peak = after.ru_maxrss if after.ru_maxrss > _RSS_FLOOR_KB else None
    if error is None and not _pending and not out.dropped and not err.dropped:
        # The usual answer, formatted as bytes in one step (the kernel passes the value on as the
        # tool's content): half the cost of a dict through the encoder.
        return _EVAL_ANSWER % (cpu_ms, b"null" if peak is None else b"%d" % peak,
                               _quote("".join(out.parts)).encode("utf-8", "replace") if out.parts else b'""',
                               _quote("".join(err.parts)).encode("utf-8", "replace") if err.parts else b'""')
    cpu_ms = round(cpu_ms, 3)
    result = {"cpu_ms": cpu_ms, "peak_rss_kb": peak, "stdout": "".join(out.parts), "stderr": "".join(err.parts)}
    if out.dropped:
        result["stdout_dropped"] = out.dropped
    if err.dropped:
        result["stderr_dropped"] = err.dropped
    if error is not None:
        result["error"] = error[-OUTPUT_CAP:]
    if _pending:
        result["pending_queries"] = list(_pending)
    return _line({"ok": True, "value": result})


def op_answers(req):
    answers = req["answers"]
    if not isinstance(answers, dict):
        raise ValueError("answers must be an object {query_id: text}")
    stored = _namespace.setdefault("answers", {})
    names = []
    for qid, text in answers.items():
        if not isinstance(qid, str) or not qid.isidentifier():
            raise ValueError("query id %r is not a valid variable name" % (qid,))
        stored[qid] = text
        _namespace[qid] = text
        names.append(qid)
    return {"stored": names, "answers_variable": "answers"}


_ops = {"load": op_load, "list": op_list, "peek": op_peek, "scan": op_scan, "answers": op_answers,
        "servers": op_servers,
        "ping": lambda req: {"pong": True}}


def main():
    _send({"ready": True, "python": sys.version.split()[0]})
    while True:
        req = _receive()
        name = req.get("op")
        try:
            if name == "eval":  # answers with its own line
                _proto_out.write(op_eval(req))
                continue
            op = _ops.get(name)
            if op is None:
                raise ValueError("unknown op %r" % (name,))
            answer = {"ok": True, "value": op(req)}
        except MemoryError:
            answer = {"ok": False, "error": "MemoryError: the REPL's memory limit was reached"}
        except Exception as e:
            answer = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        _usage[0] = _getrusage(_SELF)  # the next eval's CPU time starts here
        _send(answer)


main()

//! `io` and `print` of the capability `lua.io` (SPEC §7.1, DESIGN §15.3
//! "The `lua.io` capability").
//!
//! The guest's process has three files, `io.stdin`, `io.stdout` and
//! `io.stderr`, over the request's streams (`super::process_view`):
//! standard input is the runner ABI's input bytes (empty for operations
//! without one); what `print`, `io.write` and the files' `write` put out
//! goes, in program order, to the request's captured output when the runner
//! context asks for it (`capture`, at most its `max_bytes_per_stream` per
//! stream, past which a write fails as on a full device), and is dropped
//! otherwise. No file or process is ever opened: `io.open`, `io.popen` and
//! `io.tmpfile` answer `nil`, `"NAME: not available in the sandbox"` and
//! the error code of a refused permission, and `io.lines`, `io.input` and
//! `io.output` given a file name fail as Lua's do when the system refuses
//! to open it (`cannot open file 'NAME' (not available in the sandbox)`).
//!
//! Everything else is Lua 5.4's `liolib.c` (and `print` its `lbaselib.c`)
//! rewritten over those streams: the read formats (`"n"`, `"l"`, `"L"`,
//! `"a"`, a count, with or without the old `*`), `lines` iterators, numbers
//! written as `%.14g` or as integers, `io.type`, the default input and
//! output, and every argument check and message. The standard files behave
//! as pipes: `seek` fails (`Illegal seek`), `setvbuf` and `flush` succeed,
//! `close` answers `cannot close standard file`, reading standard output
//! or writing standard input fails with `Bad file descriptor`. A file
//! prints as `FILE*: #<n>` (an object number, never an address, DESIGN
//! §15.3-a).
//!
//! The functions are C functions written against Lua's C API
//! (`mlua::ffi`), not `mlua` callbacks, so that their errors are Lua's
//! strings with the caller's position (see `super::os`). Every one of them
//! keeps to one rule: no Rust value with a destructor is alive while a Lua
//! API call that may raise runs (a Lua error unwinds with `longjmp`).
//!
//! Cost: each call is one instruction and each format it reads one more
//! unit (a `lines` iterator repeats up to 250 formats per call); results
//! are charged by allocation; the whitespace `read("n")` skips, which
//! allocates nothing, is charged per 16 bytes; writes copy at most the
//! capture bound per request.

use super::os::view_of;
use super::process_view::ProcessView;
use super::process_view::{InputSpan, Stream, Written};
use mlua::{Function, LightUserData, Lua, Table, ffi};
use quirl_lua_metered_vm as vm;
use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::Arc;

/// The metatable name of file handles (Lua's `LUA_FILEHANDLE`).
const FILE_HANDLE: &std::ffi::CStr = c"FILE*";
/// Registry fields of the default input and output (Lua's `IO_INPUT`,
/// `IO_OUTPUT`).
const IO_INPUT: &std::ffi::CStr = c"_IO_input";
const IO_OUTPUT: &std::ffi::CStr = c"_IO_output";
/// Most formats a `lines` iterator keeps (Lua's `MAXARGLINE`).
const LINES_FORMATS_MAX: c_int = 250;
/// Bytes of whitespace `read("n")` skips per unit charged.
const SKIP_BYTES_PER_UNIT: usize = 16;
/// Bytes of an `open`/`popen` mode checked per unit charged: the check
/// reads a mode byte by byte, whatever its length (`metered-lua/LOOPS.md`).
const MODE_BYTES_PER_UNIT: usize = 16;
/// What an opening that the sandbox refuses answers after the name.
const REFUSED: &std::ffi::CStr = c"not available in the sandbox";

/// Install `io` and `print` as globals of `lua`, over `view`, and record
/// `io` in the loaded-modules table as Lua's `luaopen_io` does (so that
/// error messages name `io.write` as Lua names it).
pub fn install(lua: &Lua, view: &Arc<ProcessView>) -> mlua::Result<()> {
    let context = LightUserData(Arc::as_ptr(view).cast_mut().cast::<c_void>());
    // SAFETY: `open_io` is a C function of the kind Lua calls (see its own
    // safety comment); `mlua` pushes it like any other.
    let open = unsafe { lua.create_c_function(open_io) }?;
    let (io, print): (Table, Function) = open.call(context)?;
    let globals = lua.globals();
    globals.raw_set("io", &io)?;
    globals.raw_set("print", print)?;
    let loaded: Table = lua.named_registry_value("_LOADED")?;
    loaded.raw_set("io", io)?;
    // The view must live as long as the state (see `super::os::install`).
    lua.set_app_data(Arc::clone(view));
    Ok(())
}

/// Push a C closure over upvalue 1 (the view, at stack index `view`).
///
/// # Safety
/// A valid state with `view` an absolute stack index and room for two
/// more values.
unsafe fn push_closure(state: *mut ffi::lua_State, view: c_int, function: ffi::lua_CFunction) {
    // SAFETY: the caller's contract.
    unsafe {
        ffi::lua_pushvalue(state, view);
        ffi::lua_pushcclosure(state, function, 1);
    }
}

/// Set field `name` of the table at the top to a closure of `function`.
///
/// # Safety
/// As [`push_closure`], with a table at the top of the stack.
unsafe fn set_closure(
    state: *mut ffi::lua_State,
    view: c_int,
    name: &std::ffi::CStr,
    function: ffi::lua_CFunction,
) {
    // SAFETY: the caller's contract.
    unsafe {
        push_closure(state, view, function);
        ffi::lua_setfield(state, -2, name.as_ptr());
    }
}

/// A new standard file handle for `stream`, left at the top of the stack.
///
/// # Safety
/// A valid state whose registry holds the `FILE*` metatable.
unsafe fn push_file(state: *mut ffi::lua_State, stream: Stream) {
    // SAFETY: the block is as large as a `c_int` and Lua aligns userdata
    // for any C type; it is written once, before any guest sees it.
    unsafe {
        let block = ffi::lua_newuserdatauv(state, size_of::<c_int>(), 0).cast::<c_int>();
        block.write(c_int::try_from(stream.number()).unwrap_or(0));
        ffi::luaL_setmetatable(state, FILE_HANDLE.as_ptr());
    }
}

/// Build the file metatable and the standard files, and return `io` and
/// `print`, all closing over argument 1 (the light userdata of the VM's
/// `ProcessView`).
///
/// # Safety
/// A `lua_CFunction`: Lua calls it with a valid state. The only caller is
/// [`install`], with the light userdata of a view the state keeps alive.
unsafe extern "C-unwind" fn open_io(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state within the LUA_MINSTACK slots
    // a C function is given (at most 6 used); no value with a destructor
    // in this frame.
    unsafe {
        ffi::lua_settop(state, 1);
        let view = 1;
        ffi::luaL_newmetatable(state, FILE_HANDLE.as_ptr());
        ffi::lua_createtable(state, 0, 7);
        set_closure(state, view, c"close", f_close);
        set_closure(state, view, c"flush", f_flush);
        set_closure(state, view, c"lines", f_lines);
        set_closure(state, view, c"read", f_read);
        set_closure(state, view, c"seek", f_seek);
        set_closure(state, view, c"setvbuf", f_setvbuf);
        set_closure(state, view, c"write", f_write);
        ffi::lua_setfield(state, -2, c"__index".as_ptr());
        set_closure(state, view, c"__close", f_noclose);
        ffi::lua_pop(state, 1);

        ffi::lua_createtable(state, 0, 14);
        set_closure(state, view, c"close", io_close);
        set_closure(state, view, c"flush", io_flush);
        set_closure(state, view, c"input", io_input);
        set_closure(state, view, c"lines", io_lines);
        set_closure(state, view, c"open", io_open);
        set_closure(state, view, c"output", io_output);
        set_closure(state, view, c"popen", io_popen);
        set_closure(state, view, c"read", io_read);
        set_closure(state, view, c"tmpfile", io_tmpfile);
        set_closure(state, view, c"type", io_type);
        set_closure(state, view, c"write", io_write);
        for (stream, name) in [
            (Stream::Stdin, c"stdin"),
            (Stream::Stdout, c"stdout"),
            (Stream::Stderr, c"stderr"),
        ] {
            push_file(state, stream);
            match stream {
                Stream::Stdin => {
                    ffi::lua_pushvalue(state, -1);
                    ffi::lua_setfield(state, ffi::LUA_REGISTRYINDEX, IO_INPUT.as_ptr());
                }
                Stream::Stdout => {
                    ffi::lua_pushvalue(state, -1);
                    ffi::lua_setfield(state, ffi::LUA_REGISTRYINDEX, IO_OUTPUT.as_ptr());
                }
                Stream::Stderr => {}
            }
            ffi::lua_setfield(state, -2, name.as_ptr());
        }
        push_closure(state, view, print);
    }
    2
}

/// The stream of the file handle at `index`; Lua's "FILE* expected" error
/// for anything else.
///
/// # Safety
/// Called from a C function of this module on its own state.
unsafe fn to_stream(state: *mut ffi::lua_State, index: c_int) -> Stream {
    // SAFETY: `luaL_checkudata` returns a block of the `FILE*` metatable,
    // which `push_file` made as large as a `c_int` and wrote, or raises.
    let number =
        unsafe { *ffi::luaL_checkudata(state, index, FILE_HANDLE.as_ptr()).cast::<c_int>() };
    Stream::from_number(i64::from(number)).unwrap_or(Stream::Stdin)
}

/// Push the registry's default file `which`; its stream.
///
/// # Safety
/// Called from a C function of this module on its own state.
unsafe fn default_file(state: *mut ffi::lua_State, which: &std::ffi::CStr) -> Stream {
    // SAFETY: Lua API calls on a valid state; the registry field holds a
    // file handle (set by `open_io` and `g_iofile` only).
    unsafe {
        ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, which.as_ptr());
        to_stream(state, -1)
    }
}

/// Lua's `luaL_fileresult` for a failure with error code `code`: `nil`,
/// the message (after `name: ` when given), the code. Three results.
///
/// # Safety
/// Called from a C function of this module on its own state.
unsafe fn fail(
    state: *mut ffi::lua_State,
    name: *const c_char,
    message: &std::ffi::CStr,
    code: i32,
) -> c_int {
    // SAFETY: Lua API calls on a valid state; `name` is null or a string
    // Lua holds on the stack.
    unsafe {
        ffi::lua_pushnil(state);
        if name.is_null() {
            ffi::lua_pushstring(state, message.as_ptr());
        } else {
            ffi::lua_pushfstring(state, c"%s: %s".as_ptr(), name, message.as_ptr());
        }
        ffi::lua_pushinteger(state, i64::from(code));
    }
    3
}

/// The C library's message for the error codes this module answers with
/// (glibc's `strerror`, which Lua's `luaL_fileresult` uses).
fn strerror(code: i32) -> &'static std::ffi::CStr {
    match code {
        libc::EBADF => c"Bad file descriptor",
        libc::ENOSPC => c"No space left on device",
        libc::ESPIPE => c"Illegal seek",
        _ => c"Input/output error",
    }
}

/// Push `span` (bytes of the view's input) as a string.
///
/// # Safety
/// Called from a C function of this module; `span` comes from the view,
/// whose input does not change while a request runs.
unsafe fn push_span(state: *mut ffi::lua_State, span: InputSpan) {
    // SAFETY: the span is `len` readable bytes (the caller's contract).
    unsafe {
        ffi::lua_pushlstring(state, span.start.cast(), span.len);
    }
}

/// Lua's `g_read`: read from `stream` by the formats from stack index
/// `first` on; the number of results.
///
/// # Safety
/// Called from a C function of this module (upvalue 1 is the view).
unsafe fn g_read(state: *mut ffi::lua_State, stream: Stream, first: c_int) -> c_int {
    // SAFETY: Lua API calls on a valid state; every value held across a
    // call that may raise is a plain integer or a raw pointer; the view's
    // methods take and release its lock before returning.
    unsafe {
        let view = view_of(state);
        // Standard output and error are write-only: the first read fails
        // and the error is reported after the loop, as Lua does.
        let readable = stream == Stream::Stdin;
        let mut errored = false;
        // As Lua counts them: everything above index 1 (the file, or for
        // `io.read` the formats below the default input pushed on top).
        let nargs = ffi::lua_gettop(state) - 1;
        let mut n = first;
        let success;
        if nargs == 0 {
            success = readable && read_line(state, view, true);
            errored = !readable;
            n = first + 1;
        } else {
            ffi::luaL_checkstack(
                state,
                nargs + ffi::LUA_MINSTACK,
                c"too many arguments".as_ptr(),
            );
            let mut ok = true;
            let mut remaining = nargs;
            while remaining > 0 && ok {
                remaining -= 1;
                // A read without a result to allocate (an empty line, the
                // end of input) still costs a unit: a `lines` iterator
                // repeats up to 250 formats per call.
                charge(state, 1);
                if ffi::lua_type(state, n) == ffi::LUA_TNUMBER {
                    let count = ffi::luaL_checkinteger(state, n);
                    if !readable {
                        errored = true;
                        ok = false;
                        ffi::lua_pushnil(state);
                    } else if count == 0 {
                        ffi::lua_pushstring(state, c"".as_ptr());
                        ok = !view.at_end();
                    } else {
                        // A negative count is a huge `size_t` in Lua.
                        let max = usize::try_from(count).unwrap_or(usize::MAX);
                        let span = view.input(max);
                        push_span(state, span);
                        ok = span.len > 0;
                    }
                } else {
                    let format = ffi::luaL_checklstring(state, n, ptr::null_mut()).cast::<u8>();
                    let mut letter = *format;
                    if letter == b'*' {
                        letter = *format.add(1);
                    }
                    if !matches!(letter, b'n' | b'l' | b'L' | b'a') {
                        return ffi::luaL_argerror(state, n, c"invalid format".as_ptr());
                    }
                    if !readable {
                        errored = true;
                        ok = false;
                        ffi::lua_pushnil(state);
                    } else {
                        ok = match letter {
                            b'n' => read_number(state, view),
                            b'l' => read_line(state, view, true),
                            b'L' => read_line(state, view, false),
                            _ => {
                                push_span(state, view.input(usize::MAX));
                                true
                            }
                        };
                    }
                }
                n += 1;
            }
            success = ok;
        }
        if errored {
            return fail(state, ptr::null(), strerror(libc::EBADF), libc::EBADF);
        }
        if !success {
            ffi::lua_pop(state, 1);
            ffi::lua_pushnil(state);
        }
        n - first
    }
}

/// Charge `units` to the budget; raise the stop if that ends it.
///
/// # Safety
/// Called from a C function of this module (or of `super::os`), with
/// nothing to drop in the caller's frames (the stop unwinds with
/// `longjmp`).
pub(super) unsafe fn charge(state: *mut ffi::lua_State, units: i64) {
    // SAFETY: the meter charges the state's global budget; the raise never
    // returns (the caller's contract covers the unwinding).
    unsafe {
        if units > 0 && vm::lua_meter_charge(state, units) != vm::LUAQ_RUNNING {
            vm::lua_meter_raise(state);
        }
    }
}

/// Lua's `read_line`: a line without (`chop`) or with its newline; fails
/// at the end of the input (pushing an empty string to be replaced).
///
/// # Safety
/// As [`g_read`].
unsafe fn read_line(state: *mut ffi::lua_State, view: &ProcessView, chop: bool) -> bool {
    // SAFETY: as `g_read`.
    unsafe {
        match view.line(!chop) {
            Some(span) => {
                push_span(state, span);
                true
            }
            None => {
                ffi::lua_pushstring(state, c"".as_ptr());
                false
            }
        }
    }
}

/// Lua's `read_number`: the numeral the view reads, converted by Lua.
///
/// # Safety
/// As [`g_read`].
unsafe fn read_number(state: *mut ffi::lua_State, view: &ProcessView) -> bool {
    // SAFETY: as `g_read`; `text` is a stack array with a NUL after the
    // numeral (`Numeral`); `lua_meter_raise` never returns and leaves
    // nothing to drop.
    unsafe {
        let numeral = view.numeral();
        charge(
            state,
            i64::try_from(numeral.skipped / SKIP_BYTES_PER_UNIT).unwrap_or(i64::MAX),
        );
        let text = numeral
            .text
            .unwrap_or([0; super::process_view::NUMERAL_BYTES_MAX + 1]);
        if ffi::lua_stringtonumber(state, text.as_ptr().cast()) != 0 {
            true
        } else {
            ffi::lua_pushnil(state);
            false
        }
    }
}

/// Lua's `g_write`: write the arguments from `arg` on to `stream`; the
/// file (at the top) or a failure.
///
/// # Safety
/// Called from a C function of this module (upvalue 1 is the view), with
/// the file to return at the top of the stack.
unsafe fn g_write(state: *mut ffi::lua_State, stream: Stream, mut arg: c_int) -> c_int {
    // SAFETY: Lua API calls on a valid state; the bytes written are a
    // string Lua holds on the stack, or a stack array; the view takes and
    // releases its lock inside `write`.
    unsafe {
        let view = view_of(state);
        let mut nargs = ffi::lua_gettop(state) - arg;
        let mut full = false;
        while nargs > 0 {
            nargs -= 1;
            let mut number = [0u8; 64];
            let (bytes, len) = if ffi::lua_type(state, arg) == ffi::LUA_TNUMBER {
                let len = format_number(state, arg, &mut number);
                (number.as_ptr(), len)
            } else {
                let mut len = 0usize;
                let s = ffi::luaL_checklstring(state, arg, &mut len).cast::<u8>();
                (s, len)
            };
            if !full {
                let written = view.write(stream, std::slice::from_raw_parts(bytes, len));
                full = written == Written::Full;
            }
            arg += 1;
        }
        if !full {
            return 1;
        }
        let code = if stream == Stream::Stdin {
            libc::EBADF
        } else {
            libc::ENOSPC
        };
        fail(state, ptr::null(), strerror(code), code)
    }
}

/// The number at `index` as `io.write` writes it (`LUA_INTEGER_FMT` or
/// `LUA_NUMBER_FMT`, `%.14g`) into `buffer`; its length.
///
/// # Safety
/// A valid state with a number at `index`.
unsafe fn format_number(state: *mut ffi::lua_State, index: c_int, buffer: &mut [u8; 64]) -> usize {
    // SAFETY: `snprintf` writes at most the buffer's length, NUL included,
    // and returns the length it needed; the format takes one double.
    let written = unsafe {
        if ffi::lua_isinteger(state, index) != 0 {
            let value = ffi::lua_tointegerx(state, index, ptr::null_mut());
            libc::snprintf(
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                c"%lld".as_ptr(),
                value,
            )
        } else {
            let value = ffi::lua_tonumberx(state, index, ptr::null_mut());
            libc::snprintf(
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                c"%.14g".as_ptr(),
                value,
            )
        }
    };
    usize::try_from(written).unwrap_or(0).min(buffer.len() - 1)
}

/// `print(...)`, Lua's `luaB_print` writing to the guest's standard output:
/// each argument as `tostring` shows it, tab-separated, then a newline. A
/// write past the capture bound is dropped, as stock `print` ignores a
/// failed write.
unsafe extern "C-unwind" fn print(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: a closure of `open_io`: upvalue 1 is the view. Lua API calls
    // on a valid state; `luaL_tolstring` may run `__tostring` (guest code)
    // and raise, with nothing held in this frame but integers and
    // pointers; each string written is held on the stack while written.
    unsafe {
        let view = view_of(state);
        let n = ffi::lua_gettop(state);
        for i in 1..=n {
            let mut len = 0usize;
            let s = ffi::luaL_tolstring(state, i, &mut len).cast::<u8>();
            if i > 1 {
                view.write(Stream::Stdout, b"\t");
            }
            view.write(Stream::Stdout, std::slice::from_raw_parts(s, len));
            ffi::lua_pop(state, 1);
        }
        view.write(Stream::Stdout, b"\n");
    }
    0
}

/// `io.write(...)`: to the default output.
unsafe extern "C-unwind" fn io_write(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `g_write`, with the default output pushed on top.
    unsafe {
        let stream = default_file(state, IO_OUTPUT);
        g_write(state, stream, 1)
    }
}

/// `file:write(...)`.
unsafe extern "C-unwind" fn f_write(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `g_write`, with the file pushed on top.
    unsafe {
        let stream = to_stream(state, 1);
        ffi::lua_pushvalue(state, 1);
        g_write(state, stream, 2)
    }
}

/// `io.read(...)`: from the default input.
unsafe extern "C-unwind" fn io_read(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `g_read`. Lua's `io_read` pushes the file above the
    // formats and counts them from 1.
    unsafe {
        let stream = default_file(state, IO_INPUT);
        g_read(state, stream, 1)
    }
}

/// `file:read(...)`.
unsafe extern "C-unwind" fn f_read(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `g_read`.
    unsafe {
        let stream = to_stream(state, 1);
        g_read(state, stream, 2)
    }
}

/// Lua's `aux_lines`: the iterator over the file at index 1 with the
/// formats above it.
///
/// # Safety
/// Called from a C function of this module (upvalue 1 is the view).
unsafe fn aux_lines(state: *mut ffi::lua_State) {
    // SAFETY: Lua API calls on a valid state; the closure's upvalues are
    // the view, the file, the format count and the formats (at most
    // LINES_FORMATS_MAX + 3 < 255).
    unsafe {
        let n = ffi::lua_gettop(state) - 1;
        ffi::luaL_argcheck(
            state,
            c_int::from(n <= LINES_FORMATS_MAX),
            LINES_FORMATS_MAX + 2,
            c"too many arguments".as_ptr(),
        );
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_pushvalue(state, 1);
        ffi::lua_pushinteger(state, i64::from(n));
        ffi::lua_rotate(state, 2, 3);
        ffi::lua_pushcclosure(state, io_readline, 3 + n);
    }
}

/// The `lines` iterator: Lua's `io_readline` (a file of the sandbox is
/// never closed by it).
unsafe extern "C-unwind" fn io_readline(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: a closure of `aux_lines`: upvalue 1 is the view, 2 the file,
    // 3 the count, then the formats. Lua API calls on a valid state.
    unsafe {
        let stream = to_stream(state, ffi::lua_upvalueindex(2));
        let n = c_int::try_from(ffi::lua_tointegerx(
            state,
            ffi::lua_upvalueindex(3),
            ptr::null_mut(),
        ))
        .unwrap_or(0);
        ffi::lua_settop(state, 1);
        ffi::luaL_checkstack(state, n, c"too many arguments".as_ptr());
        for i in 1..=n {
            ffi::lua_pushvalue(state, ffi::lua_upvalueindex(3 + i));
        }
        let results = g_read(state, stream, 2);
        if ffi::lua_toboolean(state, -results) != 0 {
            return results;
        }
        if results > 1 {
            return ffi::luaL_error(
                state,
                c"%s".as_ptr(),
                ffi::lua_tolstring(state, -results + 1, ptr::null_mut()),
            );
        }
        0
    }
}

/// `io.lines([filename, ...])`: over the default input; a file name is
/// refused as Lua refuses a file it cannot open.
unsafe extern "C-unwind" fn io_lines(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state; the name is a string Lua
    // holds at index 1.
    unsafe {
        if ffi::lua_type(state, 1) == ffi::LUA_TNONE {
            ffi::lua_pushnil(state);
        }
        if ffi::lua_type(state, 1) == ffi::LUA_TNIL {
            default_file(state, IO_INPUT);
            ffi::lua_replace(state, 1);
            to_stream(state, 1);
            aux_lines(state);
            return 1;
        }
        let name = ffi::luaL_checklstring(state, 1, ptr::null_mut());
        cannot_open(state, name)
    }
}

/// `file:lines(...)`.
unsafe extern "C-unwind" fn f_lines(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `aux_lines`, after Lua's check of the file.
    unsafe {
        to_stream(state, 1);
        aux_lines(state);
    }
    1
}

/// Raise Lua's error for a file `name` that cannot be opened.
///
/// # Safety
/// Called from a C function of this module; `name` a string Lua holds.
unsafe fn cannot_open(state: *mut ffi::lua_State, name: *const c_char) -> c_int {
    // SAFETY: `luaL_error` formats two C strings and raises.
    unsafe {
        ffi::luaL_error(
            state,
            c"cannot open file '%s' (%s)".as_ptr(),
            name,
            REFUSED.as_ptr(),
        )
    }
}

/// Lua's `g_iofile`: set the default file `which` (a file handle; a file
/// name is refused) and return the current one.
///
/// # Safety
/// Called from a C function of this module.
unsafe fn g_iofile(state: *mut ffi::lua_State, which: &std::ffi::CStr) -> c_int {
    // SAFETY: Lua API calls on a valid state.
    unsafe {
        if ffi::lua_isnoneornil(state, 1) == 0 {
            let name = ffi::lua_tolstring(state, 1, ptr::null_mut());
            if !name.is_null() {
                return cannot_open(state, name);
            }
            to_stream(state, 1);
            ffi::lua_pushvalue(state, 1);
            ffi::lua_setfield(state, ffi::LUA_REGISTRYINDEX, which.as_ptr());
        }
        ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, which.as_ptr());
    }
    1
}

/// `io.input([file])`.
unsafe extern "C-unwind" fn io_input(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: see `g_iofile`.
    unsafe { g_iofile(state, IO_INPUT) }
}

/// `io.output([file])`.
unsafe extern "C-unwind" fn io_output(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: see `g_iofile`.
    unsafe { g_iofile(state, IO_OUTPUT) }
}

/// The bytes of `text` before its first NUL (what C reads of a mode).
fn until_nul(text: &[u8]) -> &[u8] {
    text.split(|&b| b == 0).next().unwrap_or_default()
}

/// Lua's `l_checkmode` for `io.open`: `r`, `w` or `a`, an optional `+`,
/// then only `b`s.
fn open_mode_is_valid(mode: &[u8]) -> bool {
    let rest = match mode.split_first() {
        Some((first, rest)) if b"rwa".contains(first) => rest,
        _ => return false,
    };
    let rest = rest.strip_prefix(b"+").unwrap_or(rest);
    rest.iter().all(|&b| b == b'b')
}

/// The bytes of the mode at `index` (or the default), Lua's
/// `luaL_optlstring`, charged per [`MODE_BYTES_PER_UNIT`] bytes before
/// any check reads them: a guest's mode may be as long as the memory limit
/// allows, and the same string may be passed at every call.
///
/// # Safety
/// Called from a C function of this module; the bytes live while the
/// string stays on the stack.
unsafe fn opt_bytes<'a>(
    state: *mut ffi::lua_State,
    index: c_int,
    default: &'static std::ffi::CStr,
) -> &'a [u8] {
    // SAFETY: `luaL_optlstring` returns `len` bytes Lua holds, or the
    // default, or raises; `charge` may raise, with nothing held here.
    unsafe {
        let mut len = 0usize;
        let s = ffi::luaL_optlstring(state, index, default.as_ptr(), &mut len);
        charge(
            state,
            i64::try_from(len / MODE_BYTES_PER_UNIT).unwrap_or(i64::MAX),
        );
        std::slice::from_raw_parts(s.cast::<u8>(), len)
    }
}

/// `io.open(filename [, mode])`: Lua's checks, then the refusal.
unsafe extern "C-unwind" fn io_open(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state; `name` and `mode` are
    // strings Lua holds at indices 1 and 2.
    unsafe {
        let name = ffi::luaL_checklstring(state, 1, ptr::null_mut());
        let mode = until_nul(opt_bytes(state, 2, c"r"));
        ffi::luaL_argcheck(
            state,
            c_int::from(open_mode_is_valid(mode)),
            2,
            c"invalid mode".as_ptr(),
        );
        fail(state, name, REFUSED, libc::EACCES)
    }
}

/// `io.popen(prog [, mode])`: Lua's checks, then the refusal.
unsafe extern "C-unwind" fn io_popen(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `io_open`.
    unsafe {
        let name = ffi::luaL_checklstring(state, 1, ptr::null_mut());
        let mode = until_nul(opt_bytes(state, 2, c"r"));
        ffi::luaL_argcheck(
            state,
            c_int::from(mode == b"r" || mode == b"w"),
            2,
            c"invalid mode".as_ptr(),
        );
        fail(state, name, REFUSED, libc::EACCES)
    }
}

/// `io.tmpfile()`: the refusal.
unsafe extern "C-unwind" fn io_tmpfile(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: see `fail`.
    unsafe { fail(state, ptr::null(), REFUSED, libc::EACCES) }
}

/// `io.type(obj)`.
unsafe extern "C-unwind" fn io_type(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state.
    unsafe {
        ffi::luaL_checkany(state, 1);
        if ffi::luaL_testudata(state, 1, FILE_HANDLE.as_ptr()).is_null() {
            ffi::lua_pushnil(state);
        } else {
            ffi::lua_pushstring(state, c"file".as_ptr());
        }
    }
    1
}

/// Lua's `io_noclose`: a standard file stays open.
unsafe extern "C-unwind" fn f_noclose(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state.
    unsafe {
        ffi::lua_pushnil(state);
        ffi::lua_pushstring(state, c"cannot close standard file".as_ptr());
    }
    2
}

/// `file:close()`.
unsafe extern "C-unwind" fn f_close(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua's check of the file, then `f_noclose`.
    unsafe {
        to_stream(state, 1);
        f_noclose(state)
    }
}

/// `io.close([file])`: the default output without an argument.
unsafe extern "C-unwind" fn io_close(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state.
    unsafe {
        if ffi::lua_type(state, 1) == ffi::LUA_TNONE {
            ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, IO_OUTPUT.as_ptr());
        }
        f_close(state)
    }
}

/// `io.flush()`: `true` (the streams hold no buffer).
unsafe extern "C-unwind" fn io_flush(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state.
    unsafe {
        default_file(state, IO_OUTPUT);
        ffi::lua_pushboolean(state, 1);
    }
    1
}

/// `file:flush()`: `true`.
unsafe extern "C-unwind" fn f_flush(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state.
    unsafe {
        to_stream(state, 1);
        ffi::lua_pushboolean(state, 1);
    }
    1
}

/// `file:seek([whence [, offset]])`: Lua's checks, then the failure of a
/// pipe.
unsafe extern "C-unwind" fn f_seek(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua API calls on a valid state; the option list is a stack
    // array of static C strings ending in null.
    unsafe {
        to_stream(state, 1);
        let names = [
            c"set".as_ptr(),
            c"cur".as_ptr(),
            c"end".as_ptr(),
            ptr::null(),
        ];
        ffi::luaL_checkoption(state, 2, c"cur".as_ptr(), names.as_ptr());
        ffi::luaL_optinteger(state, 3, 0);
        fail(state, ptr::null(), strerror(libc::ESPIPE), libc::ESPIPE)
    }
}

/// `file:setvbuf(mode [, size])`: Lua's checks, then `true`.
unsafe extern "C-unwind" fn f_setvbuf(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `f_seek`.
    unsafe {
        to_stream(state, 1);
        let names = [
            c"no".as_ptr(),
            c"full".as_ptr(),
            c"line".as_ptr(),
            ptr::null(),
        ];
        ffi::luaL_checkoption(state, 2, ptr::null(), names.as_ptr());
        ffi::luaL_optinteger(state, 3, 1024);
        ffi::lua_pushboolean(state, 1);
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_modes_are_lua_s() {
        for mode in ["r", "w", "a", "r+", "w+b", "ab", "rbb", "a+"] {
            assert!(open_mode_is_valid(mode.as_bytes()), "{mode}");
        }
        for mode in ["", "x", "rw", "r+r", "+", "br", "r b"] {
            assert!(!open_mode_is_valid(mode.as_bytes()), "{mode}");
        }
    }

    #[test]
    fn error_messages_are_the_c_library_s() {
        for code in [libc::EBADF, libc::ENOSPC, libc::ESPIPE] {
            let os = std::io::Error::from_raw_os_error(code).to_string();
            let ours = strerror(code).to_str().unwrap_or_default();
            assert!(os.starts_with(ours), "{os} / {ours}");
        }
    }
}

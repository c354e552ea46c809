"""Stand-in nvidia-smi for simulated GPU hosts.

Reads everything through NVML (the stand-in libnvidia-ml.so.1, via pynvml),
so it hangs when NVML hangs and fails when the driver is missing, like the
real tool. Supported:
  nvidia-smi                                     summary table
  nvidia-smi -L
  nvidia-smi --query-gpu=F,... --format=csv[,noheader][,nounits] [-i N]
  nvidia-smi --query-compute-apps=F,... --format=csv[,noheader][,nounits]
  nvidia-smi [-i N] -pm 0|1
  nvidia-smi --gpu-reset [-i N]  (also -r)
Exit codes follow nvidia-smi(1): 0 ok, 2 invalid argument, 4 no permission,
9 driver not loaded, 12 library not found, 15 GPU lost, 255 other error.
"""

import datetime
import os
import sys

STATE = "/run/gpusim"
CLAIMS = STATE + "/claims"
MIB = 1024 * 1024

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the "
             "NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
             "and running.\n")
NO_LIBRARY = ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. "
              "Please make sure that the NVIDIA Display Driver is properly "
              "installed and present in your system.\nPlease also try adding "
              "directory that contains libnvidia-ml.so to your system PATH.\n")

try:
    import pynvml
except ImportError:  # pragma: no cover
    sys.stdout.write(NO_LIBRARY)
    sys.exit(12)


def fail(message, code):
    sys.stdout.write(message)
    sys.stdout.flush()
    sys.exit(code)


def init():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        fail(NO_LIBRARY, 12)
    except pynvml.NVMLError_DriverNotLoaded:
        fail(NO_DRIVER, 9)
    except pynvml.NVMLError_NoPermission:
        fail("Failed to initialize NVML: Insufficient Permissions\n", 4)
    except pynvml.NVMLError as err:
        fail("Failed to initialize NVML: %s\n" % err, 255)


def gpu_info(index):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    return {
        "handle": handle,
        "index": index,
        "name": pynvml.nvmlDeviceGetName(handle),
        "uuid": pynvml.nvmlDeviceGetUUID(handle),
        "pci.bus_id": pci.busId,
        "bus": pci.bus,
        "minor_number": pynvml.nvmlDeviceGetMinorNumber(handle),
        "memory.total": memory.total // MIB,
        "memory.reserved": memory.reserved // MIB,
        "memory.used": memory.used // MIB,
        "memory.free": memory.free // MIB,
        "persistence_mode": "Enabled" if pynvml.nvmlDeviceGetPersistenceMode(handle)
                            else "Disabled",
        "display_active": "Disabled",
        "driver_version": pynvml.nvmlSystemGetDriverVersion(),
        "compute": pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
        "graphics": pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
    }


def parse_indices(text, count):
    if text is None:
        return list(range(count))
    indices = []
    for part in text.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            indices.append(int(part))
            continue
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            if part in (pynvml.nvmlDeviceGetUUID(handle), bus) or \
                    (len(part) >= 7 and bus.lower().endswith(part.lower())):
                indices.append(index)
                break
        else:
            fail("No devices were found\n" if part.isdigit() else
                 "Invalid device: %s\n" % part, 6 if part.isdigit() else 2)
    return indices


def process_name(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            argv = handle.read().split(b"\0")
        return argv[0].decode(errors="replace") or "[Not Found]"
    except OSError:
        return "[Not Found]"


UNITS = {"memory.total", "memory.used", "memory.free", "memory.reserved", "used_memory",
         "used_gpu_memory"}


def csv_out(rows, fields, options):
    if "noheader" not in options:
        header = []
        for field in fields:
            unit = " [MiB]" if field in UNITS and "nounits" not in options else ""
            header.append(field + unit)
        print(", ".join(header))
    for row in rows:
        values = []
        for field in fields:
            value = row[field]
            if field in UNITS and "nounits" not in options:
                value = "%s MiB" % value
            values.append(str(value))
        print(", ".join(values))


def query_gpu(fields, options, indices):
    rows = []
    for index in indices:
        info = gpu_info(index)
        info["count"] = pynvml.nvmlDeviceGetCount()
        info["gpu_uuid"] = info["uuid"]
        info["gpu_name"] = info["name"]
        info["pci.bus"] = "0x%02X" % info["bus"]
        info["mig.mode.current"] = "[N/A]"
        rows.append(info)
    for field in fields:
        if rows and field not in rows[0]:
            fail('Field "%s" is not a valid field to query.\n\n' % field, 2)
    csv_out(rows, fields, options)


def query_apps(fields, options, indices):
    rows = []
    for index in indices:
        info = gpu_info(index)
        for proc in info["compute"]:
            rows.append({
                "pid": proc.pid,
                "process_name": process_name(proc.pid),
                "used_memory": (proc.usedGpuMemory or 0) // MIB,
                "used_gpu_memory": (proc.usedGpuMemory or 0) // MIB,
                "gpu_uuid": info["uuid"],
                "gpu_bus_id": info["pci.bus_id"],
                "gpu_name": info["name"],
            })
    for field in fields:
        if field not in ("pid", "process_name", "used_memory", "used_gpu_memory",
                         "gpu_uuid", "gpu_bus_id", "gpu_name"):
            fail('Field "%s" is not a valid field to query.\n\n' % field, 2)
    csv_out(rows, fields, options)


def summary(indices):
    infos = [gpu_info(index) for index in indices]
    driver = pynvml.nvmlSystemGetDriverVersion()
    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    now = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y")
    out = [now,
           "+-----------------------------------------------------------------------------------------+",
           "| NVIDIA-SMI %-12s           Driver Version: %-12s   CUDA Version: %-9s|" % (
               driver, driver, "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)),
           "+-----------------------------------------+------------------------+----------------------+",
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for info in infos:
        busy = bool(info["compute"] or info["graphics"])
        out.append("| %3d  %-24s %5s | %-16s   Off | %20s |" % (
            info["index"], info["name"][:24], "On" if info["persistence_mode"] == "Enabled"
            else "Off", info["pci.bus_id"], "0"))
        out.append("| N/A   %2dC    P0 %13s | %22s | %8s      Default |" % (
            36 if busy else 29, "%dW / 700W" % (310 if busy else 76),
            "%dMiB / %dMiB" % (info["memory.used"], info["memory.total"]),
            "%d%%" % (0)))
        out.append("|                                         |                        |             Disabled |")
        out.append("+-----------------------------------------+------------------------+----------------------+")
    out += ["",
            "+-----------------------------------------------------------------------------------------+",
            "| Processes:                                                                              |",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|=========================================================================================|"]
    rows = 0
    for info in infos:
        for kind, procs in (("C", info["compute"]), ("G", info["graphics"])):
            for proc in procs:
                rows += 1
                out.append("| %4d   N/A  N/A  %11d %6s   %-35s %8s |" % (
                    info["index"], proc.pid, kind, process_name(proc.pid)[-35:],
                    "%dMiB" % ((proc.usedGpuMemory or 0) // MIB)))
    if not rows:
        out.append("|  No running processes found                                                             |")
    out.append("+-----------------------------------------------------------------------------------------+")
    print("\n".join(out))


def holders_of(index):
    """PIDs with /dev/nvidiaINDEX open, this process excluded."""
    target = "/dev/nvidia%d" % index
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % name):
                try:
                    if os.readlink("/proc/%s/fd/%s" % (name, fd)) == target:
                        pids.append(int(name))
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return pids


def clear_contexts(index):
    """What a reset does to the driver's leftovers on one GPU."""
    live = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            live.add(name)
    for name in os.listdir(CLAIMS):
        if "." in name:
            continue
        path = os.path.join(CLAIMS, name)
        try:
            with open(path) as handle:
                lines = handle.readlines()
        except OSError:
            continue
        kept = [line for line in lines if line.startswith("release")
                or line.split()[0] != str(index)]
        if kept == lines:
            continue
        if all(line.startswith("release") for line in kept):
            for victim in (path, path + ".gone"):
                try:
                    os.unlink(victim)
                except OSError:
                    pass
        else:
            with open(path + ".tmp", "w") as handle:
                handle.writelines(kept)
            os.rename(path + ".tmp", path)


def gpu_reset(indices):
    if os.geteuid() != 0:
        fail("Unable to reset GPU: Insufficient Permissions\n", 4)
    failed = []
    for index in indices:
        bus = gpu_info(index)["pci.bus_id"]
        if holders_of(index):
            failed.append(bus)
    if failed:
        lines = ["GPU %s is currently in use by another process.\n" % bus for bus in failed]
        lines.append("\n%d device%s currently being used by one or more other processes "
                     "(e.g., Fabric Manager, CUDA application, graphics application such "
                     "as an X server, or a monitoring application such as another "
                     "instance of nvidia-smi). Please first kill all processes using "
                     "%s device%s and all compute applications running in the system.\n"
                     % (len(failed), " is" if len(failed) == 1 else "s are",
                        "this" if len(failed) == 1 else "these",
                        "" if len(failed) == 1 else "s"))
        fail("".join(lines), 255)
    out = []
    for index in indices:
        bus = gpu_info(index)["pci.bus_id"]
        clear_contexts(index)
        out.append("GPU %s was successfully reset.\n" % bus)
    out.append("All done.\n")
    sys.stdout.write("".join(out))


def set_persistence(indices, value):
    out = []
    for index in indices:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
        try:
            pynvml.nvmlDeviceSetPersistenceMode(
                handle, pynvml.NVML_FEATURE_ENABLED if value else pynvml.NVML_FEATURE_DISABLED)
        except pynvml.NVMLError_NoPermission:
            fail("Unable to set persistence mode for GPU %s: Insufficient Permissions\n"
                 "Terminating early due to previous errors.\n" % bus, 4)
        out.append("%s Legacy persistence mode for GPU %s.\n" % (
            "Enabled" if value else "Disabled", bus))
    out.append("All done.\n")
    sys.stdout.write("".join(out))


def main(argv):
    index_text = None
    query_gpu_fields = query_app_fields = None
    options = set()
    action = None
    persistence = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = None
        if "=" in arg and arg.startswith("--"):
            arg, value = arg.split("=", 1)

        def take():
            nonlocal i
            if value is not None:
                return value
            i += 1
            if i >= len(argv):
                fail("Option %s requires an argument.\n" % arg, 2)
            return argv[i]
        if arg in ("-i", "--id"):
            index_text = take()
        elif arg == "--query-gpu":
            query_gpu_fields = [f.strip() for f in take().split(",")]
        elif arg == "--query-compute-apps":
            query_app_fields = [f.strip() for f in take().split(",")]
        elif arg == "--format":
            options = {f.strip() for f in take().split(",")}
        elif arg in ("-pm", "--persistence-mode"):
            persistence = take()
            if persistence not in ("0", "1", "ENABLED", "DISABLED"):
                fail("Invalid value for persistence mode: %s\n" % persistence, 2)
            persistence = persistence in ("1", "ENABLED")
            action = "pm"
        elif arg in ("-r", "--gpu-reset"):
            action = "reset"
        elif arg in ("-L", "--list-gpus"):
            action = "list"
        elif arg in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            fail("Invalid combination of input arguments. Please run 'nvidia-smi -h' "
                 "for help.\n", 2)
        i += 1
    init()
    try:
        count = pynvml.nvmlDeviceGetCount()
        indices = parse_indices(index_text, count)
        if query_gpu_fields:
            query_gpu(query_gpu_fields, options, indices)
        elif query_app_fields:
            query_apps(query_app_fields, options, indices)
        elif action == "pm":
            set_persistence(indices, persistence)
        elif action == "reset":
            gpu_reset(indices)
        elif action == "list":
            for index in indices:
                info = gpu_info(index)
                print("GPU %d: %s (UUID: %s)" % (index, info["name"], info["uuid"]))
        else:
            summary(indices)
    except pynvml.NVMLError_DriverNotLoaded:
        fail(NO_DRIVER, 9)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Read the simulated GPUs through the unmodified pynvml; print JSON.

Runs on a simulated host. Starts its own holders (children of this
process) and kills only those.
"""
import ctypes
import json
import os
import re
import signal
import subprocess
import time

import pynvml

MIB = 1024 * 1024


def wait_file(path, timeout=10):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise SystemExit("no %s after %d s" % (path, timeout))
        time.sleep(0.01)


def start_holder(gpu, mib, token):
    proc = subprocess.Popen(["/usr/bin/python3", "/usr/local/lib/gpusim/gpusim.py", "_hold",
                             "--gpu", str(gpu), "--mib", str(mib), "--ready", token])
    wait_file("/run/gpusim/ready/" + token)
    return proc


def proc_state(pid):
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def own_device_links():
    links = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            links.add(target)
    return sorted(links)


def memory(handle):
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    return {"v1_total": v1.total, "v1_used": v1.used, "v1_free": v1.free,
            "v2_version": v2.version, "v2_total": v2.total, "v2_reserved": v2.reserved,
            "v2_used": v2.used, "v2_free": v2.free}


def process_list(function, handle):
    return [{"pid": p.pid, "usedGpuMemory": p.usedGpuMemory,
             "gpuInstanceId": p.gpuInstanceId, "computeInstanceId": p.computeInstanceId}
            for p in function(handle)]


def raw_first_call(handle):
    """The first half of the two-call pattern, straight through ctypes."""
    function = pynvml.nvmlLib.nvmlDeviceGetComputeRunningProcesses_v3
    count = ctypes.c_uint(0)
    ret = function(handle, ctypes.byref(count), None)
    return {"return": ret, "count": count.value}


def main():
    out = {}
    pynvml.nvmlInit()
    out["driver_version"] = pynvml.nvmlSystemGetDriverVersion()
    out["nvml_version"] = pynvml.nvmlSystemGetNVMLVersion()
    out["count"] = pynvml.nvmlDeviceGetCount()
    out["client_device_links"] = own_device_links()
    gpus = []
    for index in range(out["count"]):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        try:
            pynvml.nvmlDeviceGetMigMode(handle)
            mig = "supported"
        except pynvml.NVMLError_NotSupported:
            mig = "not supported"
        gpus.append({
            "index": pynvml.nvmlDeviceGetIndex(handle),
            "name": pynvml.nvmlDeviceGetName(handle),
            "uuid": pynvml.nvmlDeviceGetUUID(handle),
            "minor": pynvml.nvmlDeviceGetMinorNumber(handle),
            "pci_bus_id": pci.busId,
            "pci_bus_id_legacy": pci.busIdLegacy,
            "pci_bus": pci.bus,
            "persistence_mode": pynvml.nvmlDeviceGetPersistenceMode(handle),
            "display_active": pynvml.nvmlDeviceGetDisplayActive(handle),
            "mig": mig,
            "by_uuid_index": pynvml.nvmlDeviceGetIndex(
                pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(handle))),
            "by_pci_index": pynvml.nvmlDeviceGetIndex(
                pynvml.nvmlDeviceGetHandleByPciBusId(pci.busId)),
            "idle": memory(handle),
            "idle_compute": process_list(pynvml.nvmlDeviceGetComputeRunningProcesses, handle),
            "idle_first_call": raw_first_call(handle),
        })
    out["gpus"] = gpus
    out["uuid_format_ok"] = all(
        re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", g["uuid"])
        for g in gpus)
    out["pci_format_ok"] = all(
        re.match(r"^00000000:[0-9A-F]{2}:00\.0$", g["pci_bus_id"]) for g in gpus)
    out["uuids_unique"] = len({g["uuid"] for g in gpus}) == len(gpus)

    # One holder of 40 GiB on GPU 0.
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    holder = start_holder(0, 40960, "shapes-%d" % os.getpid())
    out["holder_pid"] = holder.pid
    out["held"] = memory(handle)
    out["held_compute_v3"] = process_list(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    out["held_compute_v2"] = process_list(pynvml.nvmlDeviceGetComputeRunningProcesses_v2, handle)
    out["held_graphics"] = process_list(pynvml.nvmlDeviceGetGraphicsRunningProcesses, handle)
    out["held_mps"] = process_list(pynvml.nvmlDeviceGetMPSComputeRunningProcesses, handle)
    out["held_first_call"] = raw_first_call(handle)
    out["held_other_gpu_compute"] = process_list(
        pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetHandleByIndex(1))

    # Kill it and do not reap it: memory must come back while it is a zombie.
    os.kill(holder.pid, signal.SIGKILL)
    started = time.time()
    while pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used:
        if time.time() - started > 5:
            break
        time.sleep(0.001)
    out["zombie_release_seconds"] = round(time.time() - started, 4)
    out["zombie_state"] = proc_state(holder.pid)
    out["zombie_compute"] = process_list(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    out["after_zombie"] = memory(handle)
    holder.wait()

    # Cost of the calls the product polls.
    started = time.time()
    for dummy in range(50):
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    out["poll_ms"] = round((time.time() - started) * 1000 / 50, 3)
    pynvml.nvmlShutdown()
    out["client_device_links_after_shutdown"] = own_device_links()
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()

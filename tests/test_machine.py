"""tools/machine.py: what every timed table says about where it was made."""

import platform

import numpy as np
import pytest

from tools import machine


def test_the_machine_description_names_the_cores_the_system_python_and_numpy(monkeypatch):
    """The timings depend on each of them, so each is in the line: 'CPU, 3 cores, System, Python X, NumPy Y'."""
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 3)
    description = machine.machine_description()
    assert description.endswith(f", 3 cores, {platform.system()}, Python {platform.python_version()}, "
                                f"NumPy {np.__version__}")


def test_blas_threads_are_openblas_num_threads_when_set_else_one_per_core(monkeypatch):
    """OpenBLAS starts OPENBLAS_NUM_THREADS threads when it is a whole number above 0, else one per core."""
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 4)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert machine.blas_threads() == 1
    for ignored in ("0", "two", ""):
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", ignored)
        assert machine.blas_threads() == 4
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    assert machine.blas_threads() == 4


def test_the_blas_is_named_with_its_version_or_said_to_be_unknown(monkeypatch):
    """NumPy's own report gives 'name version'; a NumPy whose report has no BLAS entry gives 'an unknown BLAS'."""
    monkeypatch.setattr(machine.np, "show_config", lambda mode: {"Build Dependencies": {"blas": {
        "name": "scipy-openblas", "version": "0.3.31.188.0"}}})
    assert machine.blas_description() == "scipy-openblas 0.3.31.188.0"
    monkeypatch.setattr(machine.np, "show_config", lambda mode: {"Build Dependencies": {}})
    assert machine.blas_description() == "an unknown BLAS"


@pytest.mark.parametrize("core, kind", [("SkylakeX", "avx512"), ("Cooperlake", "avx512"), ("SapphireRapids", "avx512"),
                                        ("Haswell", "avx2"), ("Zen", "avx2"), ("ARMV8", "avx2")])
def test_the_machine_kind_is_the_one_of_the_kernels_openblas_chose(monkeypatch, core, kind):
    """OpenBLAS's kernels decide: SkylakeX's family has the small-matrix kernel the panels rely on (AVX-512);
    Haswell's (an AVX2 processor, or a Xeon under OPENBLAS_CORETYPE=Haswell), Zen's or an Arm's do not."""
    monkeypatch.setattr(machine, "openblas_core", lambda: core)
    monkeypatch.setattr(machine, "processor", lambda: ("Intel(R) Xeon(R) Platinum 8488C", ["avx2"]))
    assert machine.machine_kind() == kind


@pytest.mark.parametrize("name, core, kind", [("AMD EPYC 9R14 96-Core Processor", "SkylakeX", "avx512-amd"),
                                              ("AMD EPYC 7571", "Haswell", "avx2"),
                                              ("Intel(R) Xeon(R) Processor", "SkylakeX", "avx512")])
def test_an_amd_processor_running_avx512_kernels_is_a_kind_of_its_own(monkeypatch, name, core, kind):
    """The same SkylakeX kernels run at other speeds on an AMD EPYC Zen 4 (r(8) 1.42 there, 1.55 on the Xeon):
    its figures are kept apart from the Xeon's; an AMD processor without AVX-512 stays AVX2."""
    monkeypatch.setattr(machine, "openblas_core", lambda: core)
    monkeypatch.setattr(machine, "processor", lambda: (name, ["avx512f"]))
    assert machine.machine_kind() == kind


def test_without_openblas_the_processors_avx512f_flag_decides(monkeypatch):
    monkeypatch.setattr(machine, "openblas_core", lambda: "")
    for flags, kind in (("fpu sse2 avx2 avx512f avx512bw", "avx512"), ("fpu sse2 avx2 fma", "avx2"), ("", "avx2")):
        monkeypatch.setattr(machine, "processor", lambda: ("a processor", flags.split()))
        assert machine.machine_kind() == kind


@pytest.fixture
def cpuinfo(monkeypatch, tmp_path):
    """cpuinfo(text): /proc/cpuinfo reads as `text` from now on (and the environment forces no kernels)."""
    import builtins

    real_open = builtins.open
    fake = tmp_path / "cpuinfo"
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(fake if path == "/proc/cpuinfo" else path,
                                                                         *a, **k))
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    return fake.write_text


def test_the_processor_is_proc_cpuinfos_first_model_name_and_flags(cpuinfo):
    """speed/routes.processor reads them for the fingerprint, the machine line and the machine kind alike."""
    from speed import routes

    cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2\n\n"
            "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    assert routes.processor() == ("AMD EPYC", ["fpu", "avx2"])
    assert machine.machine_description().startswith("AMD EPYC, ")  # no family in that cpuinfo: the name alone


@pytest.mark.parametrize("vendor, family, model, said", [
    ("AuthenticAMD", 26, 2, "Zen 5; family 26 model 2"),  # an EPYC 9005 (Turin)
    ("AuthenticAMD", 25, 0x11, "Zen 4; family 25 model 17"),  # an EPYC 9004 (Genoa)
    ("AuthenticAMD", 25, 0x01, "Zen 3; family 25 model 1"),  # an EPYC 7003 (Milan)
    ("AuthenticAMD", 23, 0x01, "Zen 1; family 23 model 1"),  # an EPYC 7001 (Naples)
    ("AuthenticAMD", 23, 0x31, "Zen 2; family 23 model 49"),  # an EPYC 7002 (Rome)
    ("GenuineIntel", 6, 143, "family 6 model 143"),  # a Xeon of the 4th generation: no Zen name for Intel
])
def test_a_bare_processor_name_is_followed_by_its_family_and_model(cpuinfo, vendor, family, model, said):
    """A virtual machine may call a Zen 4 and a Zen 5 both "AMD EPYC", and their figures differ: the machine line
    says which (AMD's family and model numbers, as /proc/cpuinfo gives them in decimal)."""
    cpuinfo(f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 99\n")
    assert machine.processor_family() == said
    assert machine.machine_description().startswith(f"AMD EPYC ({said}), ")


def test_kernels_forced_by_the_environment_are_named_in_the_machine_line(monkeypatch):
    """OPENBLAS_CORETYPE=Haswell makes OpenBLAS run its AVX2 kernels on an AVX-512 processor: figures made so
    are not the processor's own, and the line says so."""
    monkeypatch.setattr(machine, "processor_family", lambda: "")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    assert machine.machine_description().startswith(f"{machine.processor()[0]} (OPENBLAS_CORETYPE Haswell), ")
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert machine.machine_description().startswith(f"{machine.processor()[0]}, ")

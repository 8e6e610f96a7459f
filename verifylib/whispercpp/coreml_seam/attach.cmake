# verifylib's Core ML seam, attached to an unchanged whisper.cpp tree.
#
# Handed to whisper.cpp's configure as CMAKE_PROJECT_INCLUDE (CMake runs it after each
# project() call), it defers, to the end of the top-level directory, adding the seam's
# source to the `whisper` library and compiling that library with WHISPER_USE_COREML. So
# src/whisper.cpp takes its Core ML path without WHISPER_COREML, whose find_library of
# Apple's frameworks is fatal off macOS, and without WHISPER_COREML_ALLOW_FALLBACK: a
# failed load fails closed, as the guide requires. No upstream file is edited.
get_property(_verifylib_seam_attached GLOBAL PROPERTY VERIFYLIB_SEAM_ATTACHED)
if(NOT _verifylib_seam_attached)
    set_property(GLOBAL PROPERTY VERIFYLIB_SEAM_ATTACHED TRUE)
    set(_verifylib_seam_dir "${CMAKE_CURRENT_LIST_DIR}")
    function(_verifylib_seam_attach)
        if(NOT TARGET whisper)
            message(FATAL_ERROR "verifylib seam: this whisper.cpp tree defines no `whisper` target")
        endif()
        if(WHISPER_COREML OR WHISPER_COREML_ALLOW_FALLBACK)
            message(FATAL_ERROR "verifylib seam: WHISPER_COREML and its fallback must stay OFF")
        endif()
        target_sources(whisper PRIVATE "${_verifylib_seam_dir}/whisper_coreml_seam.cpp")
        target_include_directories(whisper PRIVATE "${_verifylib_seam_dir}")
        target_compile_definitions(whisper PRIVATE WHISPER_USE_COREML)
        message(STATUS "verifylib seam: whisper compiled with WHISPER_USE_COREML against "
                       "${_verifylib_seam_dir}/whisper_coreml_seam.cpp")
    endfunction()
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _verifylib_seam_attach)
endif()

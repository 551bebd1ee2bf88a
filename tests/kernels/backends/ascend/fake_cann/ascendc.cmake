# A fake of CANN's ascendc.cmake for tests on hosts without CANN: the "kernel library" is a host
# C++ stand-in for the op (fake_<op>.cpp) behind the real aclrtlaunch_<op>.h signature, and ACL
# is fake_acl.cpp (host memory, host clocks). It exercises tilewise's generated CMakeLists.txt
# and host runner for real; it says nothing about the device.
set(FAKE_CANN_DIR ${CMAKE_CURRENT_LIST_DIR})

function(ascendc_library name type)
    get_filename_component(stem ${ARGV2} NAME_WE)
    add_library(${name} ${type} ${FAKE_CANN_DIR}/fake_${stem}.cpp)
    target_include_directories(${name} PUBLIC ${FAKE_CANN_DIR}/stub PRIVATE ${CMAKE_SOURCE_DIR})
    target_link_libraries(${name} PRIVATE ascendcl)
endfunction()

function(ascendc_compile_definitions name)
    target_compile_definitions(${name} ${ARGN})
endfunction()

add_library(host_intf_pub INTERFACE)
add_library(ascendcl SHARED ${FAKE_CANN_DIR}/fake_acl.cpp)
target_include_directories(ascendcl PUBLIC ${FAKE_CANN_DIR}/stub)

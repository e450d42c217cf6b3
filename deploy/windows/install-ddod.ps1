<#
.SYNOPSIS
Installs ddod, the DDO daemon, as a Windows service run by its own virtual account.

.DESCRIPTION
The Windows counterpart of deploy/systemd/ddod.service (deploy/windows/README.md). In order:

 1. Creates the local group whose members may use the service (-GroupName), unless it exists,
    and adds the account running this script to it with -AddCurrentUser.
 2. Stops the service if it runs and its ddod.exe or ddod.conf is about to change.
 3. Copies ddod.exe (and ddod.conf, with -ConfigPath) into the install directory, and gives
    the service's account read access to that directory.
 4. Creates the state directory and sets its ACL: full control for SYSTEM, Administrators and
    NT SERVICE\<name>, read and execute for the group, nothing inherited, no one else.
 5. Creates the service, or updates it: account NT SERVICE\<name> (a virtual account: no
    password), start automatic (delayed), its command line, recovery (restart after 5 s, 5 s,
    30 s; the count resets after a day; also when ddod exits with a non-zero code), its
    unrestricted service SID, and the privileges its token keeps (sc.exe privs).
 6. Grants NT SERVICE\<name> the user rights SeProfileSingleProcessPrivilege (the standby-list
    purge) and SeIncreaseQuotaPrivilege in the local security policy, through a secedit export,
    a template that adds the account to those two rights only, and secedit /configure; the
    export is kept first in %ProgramData%\DDO-policy-backup.
 7. Starts the service (unless -NoStart), or restarts it when it was running and something it
    reads at start changed.

Running it again updates what differs and leaves the rest; a running service whose binary,
configuration, command line or privileges did not change keeps running.

Needs an elevated Windows PowerShell 5.1 (powershell.exe). Not yet run on Windows: there is no
Windows build of ddod yet (docs/windows.md).

.PARAMETER DdodPath
The ddod.exe to install. Copied; the service runs the copy in -InstallDirectory.

.PARAMETER ConfigPath
A ddod.conf (DDO_* variables, one NAME=VALUE a line; docs/deploy.md) to install beside
ddod.exe; the service then runs with --config. Without it, a ddod.conf installed earlier is
kept and used.

.PARAMETER InstallDirectory
Where ddod.exe goes. Default: $env:ProgramFiles\DDO.

.PARAMETER StateDirectory
ddod's state directory (--state-dir): manifests and profiles. Default: $env:ProgramData\DDO.

.PARAMETER ServiceName
The service's name; its account is NT SERVICE\<ServiceName>. Default: ddod.

.PARAMETER GroupName
The local group whose members may use the service (--socket-group). Default: ddo-users.

.PARAMETER Preset
ddod's policy preset (--preset). Default: warm_process, as the Linux service.

.PARAMETER AddCurrentUser
Also adds the account running this script to the group (it takes effect at its next sign-in).

.PARAMETER NoStart
Installs or updates without starting (or restarting) the service.

.EXAMPLE
Set-ExecutionPolicy -Scope Process Bypass
.\install-ddod.ps1 -DdodPath C:\src\ddo\build-win\bin\ddod.exe -AddCurrentUser

Installs ddod.exe into C:\Program Files\DDO, creates the group ddo-users with the current user
in it, and starts the service ddod.

.EXAMPLE
.\install-ddod.ps1 -DdodPath .\ddod.exe -ConfigPath .\ddod.conf -WhatIf

Shows what would be done, changing nothing.
#>
#Requires -Version 5.1
[CmdletBinding(SupportsShouldProcess = $true)]
param(
    [Parameter(Mandatory = $true)]
    [ValidateNotNullOrEmpty()]
    [string] $DdodPath,

    [ValidateNotNullOrEmpty()]
    [string] $ConfigPath,

    [ValidateNotNullOrEmpty()]
    [string] $InstallDirectory = (Join-Path $env:ProgramFiles 'DDO'),

    [ValidateNotNullOrEmpty()]
    [string] $StateDirectory = (Join-Path $env:ProgramData 'DDO'),

    # No slashes, spaces or quotes: the name appears in NT SERVICE\<name> and on sc.exe's
    # command lines.
    [ValidatePattern('^[A-Za-z0-9_.-]{1,80}$')]
    [string] $ServiceName = 'ddod',

    # What Windows refuses in a local group's name, and double quotes (it is quoted on the
    # service's command line).
    [ValidatePattern('^[^"/\\\[\]:;|=,+*?<>@]{1,256}$')]
    [string] $GroupName = 'ddo-users',

    [ValidatePattern('^[a-z0-9_]+$')]
    [string] $Preset = 'warm_process',

    [switch] $AddCurrentUser,

    [switch] $NoStart
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'
Import-Module -Name (Join-Path $PSScriptRoot 'DdoDeploy.psm1') -Force

Assert-DdoAdministrator

$ddodSource = Resolve-DdoFilePath -Path $DdodPath -ParameterName 'DdodPath'
$configSource = $null
if ($PSBoundParameters.ContainsKey('ConfigPath')) {
    $configSource = Resolve-DdoFilePath -Path $ConfigPath -ParameterName 'ConfigPath'
}
$installDir = Resolve-DdoDirectoryPath -Path $InstallDirectory -ParameterName 'InstallDirectory'
$stateDir = Resolve-DdoDirectoryPath -Path $StateDirectory -ParameterName 'StateDirectory'
foreach ($pair in @(@($installDir, $stateDir), @($stateDir, $installDir))) {
    if ($pair[0] -eq $pair[1] -or
        $pair[0].StartsWith($pair[1] + '\', [System.StringComparison]::OrdinalIgnoreCase)) {
        throw "-InstallDirectory and -StateDirectory must be separate directories, neither inside the other."
    }
}

$account = "NT SERVICE\$ServiceName"
$serviceSid = Get-DdoServiceSid -ServiceName $ServiceName
$ddodTarget = Join-Path $installDir 'ddod.exe'
$configTarget = Join-Path $installDir 'ddod.conf'
$displayName = 'DDO daemon (dynamic diffusion offload)'
$description = "Keeps model weights in memory for the DDO clients of the members of $GroupName."

Write-Host "Installing ddod as the Windows service $ServiceName ($account)"

# 1. The group of the service's users.
$group = Get-LocalGroup -Name $GroupName -ErrorAction SilentlyContinue
if ($null -ne $group) {
    Write-DdoStep "group ${GroupName}: exists"
} elseif ($PSCmdlet.ShouldProcess("local group $GroupName", 'Create')) {
    # A local group's description holds at most 48 characters.
    New-LocalGroup -Name $GroupName -Description 'Users allowed to use the DDO daemon' -Confirm:$false |
        Out-Null
    Write-DdoStep "group ${GroupName}: created"
}
if ($AddCurrentUser) {
    $me = [System.Security.Principal.WindowsIdentity]::GetCurrent()
    if ($PSCmdlet.ShouldProcess("local group $GroupName", "Add $($me.Name)")) {
        try {
            Add-LocalGroupMember -Group $GroupName -Member $me.User.Value -Confirm:$false
            Write-DdoStep "group ${GroupName}: added $($me.Name) (effective at its next sign-in)"
        } catch {
            if ($_.FullyQualifiedErrorId -notlike 'MemberExists*') {
                throw
            }
            Write-DdoStep "group ${GroupName}: $($me.Name) is a member already"
        }
    }
}

# 2. What changes; the service stops before its files are replaced.
$before = Get-DdoServiceInfo -ServiceName $ServiceName
if ($null -ne $before -and $before.PathName -notmatch 'ddod\.exe') {
    throw ("A service named $ServiceName exists and does not run ddod.exe ($($before.PathName)): " +
        'choose another -ServiceName.')
}
$binaryChanged = -not (Test-DdoSameFile -Source $ddodSource -Destination $ddodTarget)
$configChanged = ($null -ne $configSource) -and
    -not (Test-DdoSameFile -Source $configSource -Destination $configTarget)
$stoppedForFiles = $false
if ($null -ne $before -and $before.State -ne 'Stopped' -and ($binaryChanged -or $configChanged)) {
    if ($PSCmdlet.ShouldProcess("service $ServiceName", 'Stop (its files are replaced)')) {
        Stop-DdoService -ServiceName $ServiceName
        $stoppedForFiles = $true
        Write-DdoStep "service ${ServiceName}: stopped to replace its files"
    }
}

# 3. The install directory.
if (-not (Test-Path -LiteralPath $installDir -PathType Container)) {
    if ($PSCmdlet.ShouldProcess($installDir, 'Create directory')) {
        New-Item -ItemType Directory -Path $installDir -Confirm:$false | Out-Null
        Write-DdoStep "created $installDir"
    }
}
if ($binaryChanged) {
    if ($PSCmdlet.ShouldProcess($ddodTarget, "Copy $ddodSource")) {
        Copy-Item -LiteralPath $ddodSource -Destination $ddodTarget -Force -Confirm:$false
        Write-DdoStep "copied $ddodSource to $ddodTarget"
    }
} else {
    Write-DdoStep "${ddodTarget}: up to date"
}
if ($null -ne $configSource) {
    if ($configChanged) {
        if ($PSCmdlet.ShouldProcess($configTarget, "Copy $configSource")) {
            Copy-Item -LiteralPath $configSource -Destination $configTarget -Force -Confirm:$false
            Write-DdoStep "copied $configSource to $configTarget"
        }
    } else {
        Write-DdoStep "${configTarget}: up to date"
    }
} elseif (Test-Path -LiteralPath $configTarget -PathType Leaf) {
    Write-DdoStep "${configTarget}: kept (no -ConfigPath given)"
}
$useConfig = ($null -ne $configSource) -or (Test-Path -LiteralPath $configTarget -PathType Leaf)
# Under Program Files the service's account reads the directory as one of Users; this entry
# keeps it readable wherever -InstallDirectory is.
if ($PSCmdlet.ShouldProcess($installDir, "Allow $account to read and execute")) {
    Add-DdoDirectoryReadAccess -Path $installDir -Sid $serviceSid
    Write-DdoStep "${installDir}: $account may read and execute"
}

# 4. The state directory and its ACL.
if (-not (Test-Path -LiteralPath $stateDir -PathType Container)) {
    if ($PSCmdlet.ShouldProcess($stateDir, 'Create directory')) {
        New-Item -ItemType Directory -Path $stateDir -Confirm:$false | Out-Null
        Write-DdoStep "created $stateDir"
    }
}
$aclAction = ("Set ACL: full control to SYSTEM, Administrators and $account; read and execute " +
    "to $GroupName; nothing inherited")
if ($PSCmdlet.ShouldProcess($stateDir, $aclAction)) {
    $fullControl = @(
        (New-Object System.Security.Principal.SecurityIdentifier('S-1-5-18')),
        (New-Object System.Security.Principal.SecurityIdentifier('S-1-5-32-544')),
        $serviceSid)
    $groupSid = Get-DdoLocalGroupSid -GroupName $GroupName
    Set-DdoDirectoryAcl -Path $stateDir -FullControl $fullControl -ReadAndExecute @($groupSid)
    Write-DdoStep ("${stateDir}: full control to SYSTEM, Administrators and $account; " +
        "read to $GroupName; no one else")
}

# 5. The service.
function Format-DdoArgument([string] $Value) {
    # Paths and the group name cannot contain a double quote (Windows refuses it in both, and
    # -GroupName's pattern), and paths have no trailing backslash (Resolve-DdoDirectoryPath).
    return '"' + $Value + '"'
}
$arguments = @('--service', '--preset', $Preset, '--state-dir', (Format-DdoArgument $stateDir),
    '--socket-group', (Format-DdoArgument $GroupName))
if ($useConfig) {
    $arguments += @('--config', (Format-DdoArgument $configTarget))
}
$commandLine = (Format-DdoArgument $ddodTarget) + ' ' + ($arguments -join ' ')

if ($null -eq $before) {
    if ($PSCmdlet.ShouldProcess("service $ServiceName", "Create: $commandLine")) {
        # Created on demand start and as LocalSystem (the default); the account and the start
        # type follow below, before it can start.
        New-Service -Name $ServiceName -BinaryPathName $commandLine -DisplayName $displayName `
            -Description $description -StartupType Manual -Confirm:$false | Out-Null
        Write-DdoStep "service ${ServiceName}: created"
    }
} elseif ($before.PathName -ne $commandLine) {
    if ($PSCmdlet.ShouldProcess("service $ServiceName", "Set command line: $commandLine")) {
        # Through WMI rather than `sc.exe config binPath=`: the command line holds double quotes,
        # which Windows PowerShell 5.1 and PowerShell 7 pass to a program differently.
        $result = Invoke-CimMethod -InputObject $before.Instance -MethodName Change `
            -Arguments @{ PathName = $commandLine }
        if ($result.ReturnValue -ne 0) {
            throw "Win32_Service.Change failed with return value $($result.ReturnValue) for $ServiceName."
        }
        Write-DdoStep "service ${ServiceName}: command line updated"
    }
}
$failureActions = 'restart/5000/restart/5000/restart/30000'
$privilegeList = $DdoRequiredPrivileges -join '/'
$serviceAction = ("Configure: account $account, start delayed automatic, recovery $failureActions, " +
    "privileges $privilegeList")
if ($PSCmdlet.ShouldProcess("service $ServiceName", $serviceAction)) {
    # No password= for a virtual account: Windows manages it.
    Invoke-DdoServiceControl -ArgumentList @('config', $ServiceName, 'obj=', $account,
        'start=', 'delayed-auto', 'DisplayName=', $displayName) | Out-Null
    Invoke-DdoServiceControl -ArgumentList @('description', $ServiceName, $description) | Out-Null
    # The service's SID in its token, as ACL entries and the user rights name it.
    Invoke-DdoServiceControl -ArgumentList @('sidtype', $ServiceName, 'unrestricted') | Out-Null
    Invoke-DdoServiceControl -ArgumentList @('failure', $ServiceName, 'reset=', '86400',
        'actions=', $failureActions) | Out-Null
    # Recovery also when ddod stops by itself with a non-zero exit code, not only on a crash.
    Invoke-DdoServiceControl -ArgumentList @('failureflag', $ServiceName, '1') | Out-Null
    Invoke-DdoServiceControl -ArgumentList @('privs', $ServiceName, $privilegeList) | Out-Null
    Write-DdoStep ("service ${ServiceName}: runs as $account, starts delayed automatic, " +
        'restarts after a failure, keeps ' + ($DdoRequiredPrivileges -join ', '))

    # The computed SID must be the one Windows gives the account, or the ACL and the user rights
    # would name someone else.
    $resolved = $null
    try {
        $resolved = (New-Object System.Security.Principal.NTAccount($account)).Translate(
            [System.Security.Principal.SecurityIdentifier])
    } catch {
        Write-Warning "$account does not resolve yet; the ACL and the user rights use $($serviceSid.Value)."
    }
    if ($null -ne $resolved -and $resolved.Value -ne $serviceSid.Value) {
        throw ("$account is $($resolved.Value), not the computed $($serviceSid.Value): the " +
            "state directory's ACL names the wrong SID.")
    }
}

# 6. The user rights the virtual account does not hold by default.
$rightsList = $DdoGrantedUserRights -join ', '
$grantedRights = @()
if ($PSCmdlet.ShouldProcess('local security policy', "Grant $rightsList to $account")) {
    $backupDir = Get-DdoPolicyBackupDirectory
    $grantedRights = @(Update-DdoUserRight -Privilege $DdoGrantedUserRights -Sid $serviceSid `
            -AccountName $account -Action Grant -BackupDirectory $backupDir)
    if ($grantedRights.Count -gt 0) {
        Write-DdoStep ("security policy: granted $($grantedRights -join ', ') to $account " +
            "(the policy before is in $backupDir)")
    } else {
        Write-DdoStep "security policy: $account holds $rightsList already"
    }
}

# 7. Start, or restart when what the service reads at start changed.
$after = Get-DdoServiceInfo -ServiceName $ServiceName
$wantedPrivileges = ($DdoRequiredPrivileges | Sort-Object) -join '/'
$settingsChanged = ($null -eq $before) -or ($before.PathName -ne $commandLine) -or
    ($before.StartName -ne $account) -or ($grantedRights.Count -gt 0) -or
    (((@($before.RequiredPrivileges) | Sort-Object) -join '/') -ne $wantedPrivileges)
$running = ($null -ne $after) -and ($after.State -ne 'Stopped')
if ($NoStart) {
    if ($running -and $settingsChanged) {
        Write-DdoStep ("service ${ServiceName}: running with its previous settings (-NoStart); " +
            "Restart-Service $ServiceName applies the new ones")
    } elseif (-not $running) {
        Write-DdoStep "service ${ServiceName}: not started (-NoStart); Start-Service $ServiceName starts it"
    }
} elseif ($running) {
    if ($settingsChanged) {
        if ($PSCmdlet.ShouldProcess("service $ServiceName", 'Restart (its settings changed)')) {
            Restart-Service -Name $ServiceName -Force -Confirm:$false
            Write-DdoStep "service ${ServiceName}: restarted with the new settings"
        }
    } else {
        Write-DdoStep "service ${ServiceName}: running, nothing it reads changed; left running"
    }
} elseif ($PSCmdlet.ShouldProcess("service $ServiceName", 'Start')) {
    try {
        Start-Service -Name $ServiceName -Confirm:$false
    } catch {
        throw ("Starting $ServiceName failed: $($_.Exception.Message) `n" +
            "sc.exe query $ServiceName shows its exit code; the System event log says why: " +
            "Get-WinEvent -FilterHashtable @{LogName='System'; ProviderName='Service Control Manager'} -MaxEvents 10")
    }
    $word = 'started'
    if ($stoppedForFiles) {
        $word = 'started again'
    }
    Write-DdoStep "service ${ServiceName}: $word"
}

Write-Host ''
Write-Host "ddod's service ${ServiceName}:"
Write-Host "  account       $account ($($serviceSid.Value))"
Write-Host "  command line  $commandLine"
Write-Host "  state         $stateDir"
Write-Host "  users         members of the local group $GroupName (a new member signs out and in)"
Write-Host "  check         Get-Service $ServiceName; sc.exe qc $ServiceName; sc.exe qprivs $ServiceName"
